"""A live widget's options (``whos_online.live.widget.WidgetOptions``): one field each, from which
the tag's keyword arguments, the widget's URL and the views' reading of it are derived. (What the
widget shows with them: ``tests/templatetags/test_live.py`` and ``tests/test_widget.py``.)"""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest
from django.http import QueryDict
from django.template import TemplateSyntaxError
from django.utils import translation

from tests.support.helpers import render
from whos_online.live.widget import TAG_OPTIONS, WIDGET_SOURCE, WidgetOptions, carried
from whos_online.templatetags.whos_online import whos_online

#: The tag's arguments that are not options of the widget's URL: the tag reads them itself.
TAG_ONLY = {"live", "here", "navigations"}


def test_the_tag_takes_each_option_with_its_default():
    parameters = inspect.signature(whos_online).parameters

    taken = {name: one.default for name, one in parameters.items() if name != "context"}
    options = {one.name: one.default for one in fields(WidgetOptions) if carried(one).in_tag}
    assert {name: taken[name] for name in options} == options
    assert set(taken) == set(options) | TAG_ONLY
    assert all(one.kind is inspect.Parameter.KEYWORD_ONLY for one in list(parameters.values())[1:])


def test_an_argument_the_tag_does_not_take_is_refused_as_the_template_compiles(backend):
    with pytest.raises(TemplateSyntaxError, match="unexpected keyword argument 'colour'"):
        render("{% load whos_online %}{% whos_online colour=1 %}")
    with pytest.raises(TemplateSyntaxError, match="unexpected keyword argument 'lang'"):
        render('{% load whos_online %}{% whos_online lang="fr" %}')


def test_the_views_render_the_tag_with_every_option():
    assert all(f" {name}={name}" in WIDGET_SOURCE for name in TAG_OPTIONS)
    assert set(TAG_OPTIONS) == {one.name for one in fields(WidgetOptions)} - {"lang"}


def test_the_url_carries_every_option_back(settings):
    settings.LANGUAGES = [("en", "English"), ("fr", "French")]
    options = WidgetOptions(peak=False, visitors=True, refresh=7, lang="fr", room="a b", site=True)

    query = options.query(None)

    assert query.startswith("peak=0&visitors=1&refresh=7&lang=fr&room=a+b&token=")
    assert query.endswith("&site=1")
    assert WidgetOptions.from_query(QueryDict(query)) == options


def test_an_empty_url_is_the_defaults_in_the_language_of_the_page():
    with translation.override("en"):
        assert WidgetOptions().query(None) == "peak=1&visitors=0&lang=en"
    assert WidgetOptions.from_query(QueryDict("")) == WidgetOptions()
    assert WidgetOptions.from_query(QueryDict("colour=red")) == WidgetOptions()


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("peak=2", "peak must be 0 or 1."),
        ("site=yes", "site must be 0 or 1."),
        ("refresh=0", "refresh must be a whole number of seconds from 1 to 86400."),
        ("room=", "A room name has 1 to"),
    ],
)
def test_a_value_the_tag_would_not_write_says_what_is_wrong(query, error):
    with pytest.raises(ValueError, match=error):
        WidgetOptions.from_query(QueryDict(query))
