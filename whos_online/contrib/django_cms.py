"""django CMS pages as rooms: ``WHOS_ONLINE = {"ROOMS": django_cms.ROOMS}``.

A page's readers and the editors working on it count in one room, named by the page's primary
key so that it keeps its name when the page moves; a page the viewer may not see is in no room
(docs/rooms-on-any-site.md). django CMS is imported at first use, so that settings can import this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from django.http import HttpRequest

#: The dotted path of ``page_room``, as ``ROOMS`` takes it.
PAGE_ROOM: Final = "whos_online.contrib.django_cms.page_room"
#: The URL names of django CMS that show a page, each given its page's room.
PAGE_URLS: Final = (
    "pages-details-by-slug",
    "pages-root",
    "admin:cms_placeholder_render_object_edit",
    "admin:cms_placeholder_render_object_preview",
)
#: A ``ROOMS`` setting for django CMS; add your own entries with ``{**ROOMS, …}``.
ROOMS: Final[dict[str, dict[str, str]]] = {name: {"call": PAGE_ROOM} for name in PAGE_URLS}


def page_room(request: HttpRequest) -> tuple[str, str] | None:
    """The room of the django CMS page ``request`` shows (``page:<pk>``) and its title in the
    request's language; None for no page, or one its viewer may not see."""
    page = _page_of(request)
    if page is None or not _may_view(request, page):
        return None
    return f"page:{page.pk}", str(page.get_title() or "")


def _page_of(request: HttpRequest) -> Any:
    """The page the request shows: the one the CMS's view resolved (``request.current_page``),
    or for the edit and preview views, the page of the content they show (None for content that
    is no page's, such as an app's object)."""
    from cms.models import Page, PageContent

    match = request.resolver_match
    if match is None:
        return None
    if match.url_name in {"pages-details-by-slug", "pages-root"}:
        page = getattr(request, "current_page", None)
        if page is None:  # a response from the CMS's page cache, without its middleware
            from cms.utils.page import get_page_from_request

            page = get_page_from_request(request, use_path=match.kwargs.get("slug", ""))
        # A Page, or CurrentPageMiddleware's lazy object, which is one only if it found one.
        return page if isinstance(page, Page) else None
    return _page_of_content(match.args, PageContent)


def _page_of_content(args: tuple[Any, ...], content_model: Any) -> Any:
    """The page whose content the edit or preview view shows (``args``: the content type's id
    and the content's), or None."""
    from django.contrib.contenttypes.models import ContentType

    try:
        content_type = ContentType.objects.get_for_id(int(args[0]))
    except (ContentType.DoesNotExist, IndexError, ValueError):
        return None
    model = content_type.model_class()
    if model is None or not issubclass(model, content_model):
        return None
    content = content_model.admin_manager.select_related("page").filter(pk=int(args[1])).first()
    return None if content is None else content.page


def _may_view(request: HttpRequest, page: Any) -> bool:
    """Whether the viewer of ``request`` is shown the page's content, as the CMS decides."""
    from cms.utils.page_permissions import user_can_view_page

    user = getattr(request, "user", None)
    if user is None:
        return False
    if page.login_required and not user.is_authenticated:
        return False
    return bool(user_can_view_page(user, page))
