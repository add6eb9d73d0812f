"""The JSON view of the counts, which pages poll, and the staff dashboard.

The JSON view records nobody (``not_recorded``) and reads Redis once (``api.snapshot``). Its
answer is publicly cacheable for ``JSON_MAX_AGE`` seconds unless it names people only some
viewers may see, so that a CDN can absorb the polls of a busy site. It fails open: while Redis
cannot be read it answers the zero counts with ``"ok": false``, which the live widget takes as
"keep showing what you have".
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_safe

from whos_online import api, store
from whos_online.conf import get_config
from whos_online.decorators import not_recorded
from whos_online.visibility import may_see_names, shows_names_to_everyone

if TYPE_CHECKING:
    from django.http import HttpRequest

#: "<", ">" and "&" written as JSON escapes, as Django's json_script does: names are anyone's
#: text, and the document must stay inert even if something renders it as HTML.
_HTML_SAFE: Final = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}


def counts_document(found: store.Snapshot | None, *, names: bool) -> dict[str, Any]:
    """The JSON view's document; ``found`` is None when Redis could not be read."""
    snapshot = store.EMPTY_SNAPSHOT if found is None else found
    counts = api.counts_of(snapshot)
    peak = api.peak_of(snapshot)
    document: dict[str, Any] = {
        "ok": found is not None,
        "users": counts.users,
        "guests": counts.guests,
        "bots": counts.bots,
        "total": counts.total,
        "peak": {"people": peak.people, "when": peak.when},
        "visitors_today": snapshot.visitors,
    }
    if names:
        listed = api.listed_users(snapshot)
        document["names"] = [{"name": user.name, "url": user.url} for user in listed]
        document["more"] = max(snapshot.visible - len(listed), 0)
    return document


@not_recorded
@require_safe
def counts(request: HttpRequest) -> HttpResponse:
    config = get_config()
    names = may_see_names(request, config)
    # A limit of 0 reads no names at all: the counts alone are cheaper to read.
    found = api.snapshot(config.display_limit if names else 0)
    body = json.dumps(counts_document(found, names=names), cls=DjangoJSONEncoder)
    response = HttpResponse(body.translate(_HTML_SAFE), content_type="application/json")
    if names and not shows_names_to_everyone(config):
        patch_cache_control(response, private=True, max_age=config.json_max_age)
    else:
        patch_cache_control(response, public=True, max_age=config.json_max_age)
    return response
