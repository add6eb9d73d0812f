from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from example_project.models import Board, Topic

# Published on purpose: the README and the login page show it.
PASSWORD = "demo-password-123"  # noqa: S105
USERNAMES = ("alice", "bob", "carol")
#: The forum's boards and topics, for trying rooms: who is reading each topic.
FORUM = (
    ("General", ("Welcome!", "Introduce yourself", "Site feedback")),
    ("Redis", ("Sorted sets for presence", "Cluster or Sentinel?")),
)
ADMIN_USERNAME = "admin"


class Command(BaseCommand):
    help = (
        f"Create the demo users {', '.join(USERNAMES)} and the superuser {ADMIN_USERNAME}, "
        f"all with the password {PASSWORD!r}, and the forum's boards and topics. Existing users "
        "and boards are left as they are."
    )

    def handle(self, *args: str, **options: Any) -> None:
        user_model = get_user_model()
        manager = user_model._default_manager
        for username in (*USERNAMES, ADMIN_USERNAME):
            if manager.filter(**{user_model.USERNAME_FIELD: username}).exists():
                self.stdout.write(f"User {username} already exists, left unchanged.")
            elif username == ADMIN_USERNAME:
                user_model.objects.create_superuser(
                    username, email=f"{username}@example.com", password=PASSWORD
                )
                self.stdout.write(self.style.SUCCESS(f"Created superuser {username}."))
            else:
                user_model.objects.create_user(username, password=PASSWORD)
                self.stdout.write(self.style.SUCCESS(f"Created user {username}."))
        self.seed_forum()
        self.stdout.write(
            f"Log in as {', '.join(USERNAMES)} or {ADMIN_USERNAME} with the password {PASSWORD!r}."
        )

    def seed_forum(self) -> None:
        if Board._default_manager.exists():
            self.stdout.write("The forum has boards already, left unchanged.")
            return
        for name, titles in FORUM:
            board = Board._default_manager.create(name=name)
            for title in titles:
                body = f"Let's talk about {title}."
                Topic._default_manager.create(board=board, title=title, body=body)
        self.stdout.write(self.style.SUCCESS(f"Created the forum's {len(FORUM)} boards."))
