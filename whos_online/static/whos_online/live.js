/* Refreshes every {% whos_online live=True %} widget on the page from whos_online's widgets view.
 *
 * Progressive enhancement: the server renders the widgets complete; every few seconds this script
 * fetches them rendered anew by the server (the site's own whos_online/online.html, in the page's
 * language) and swaps their content in. The answer is parsed as an inert document, so nothing in
 * it runs; only the element carrying data-whos-online-live is taken from it. An answer saying
 * Redis cannot be read (ok: false, or Whos-Online-Ok: 0) or a failed request leaves a widget as
 * it is. Refreshes pause while the tab is hidden. No inline script, so a strict CSP allows it.
 *
 * One client per page, however many tags it has: each tag renders this script, the browser
 * loads it once and runs it once per tag; the first run starts the client, and each later one
 * only hands it the widgets it has not seen yet (window.whosOnline.scan(), which also serves a
 * part of the page that a script swapped in). Every interval, the client asks the widgets view
 * (data-whos-online-widgets) for all the page's widgets in ONE request, each by the query string
 * of its own URL (data-whos-online-live), and is answered each one's HTML, or a 403 for a room
 * whose token is refused, which renews that widget alone. The interval is the shortest
 * data-whos-online-refresh of the page's widgets. A widget of a template written before that
 * view (no data-whos-online-widgets) is refreshed on its own from its URL, as it used to be.
 *
 * A room's widget (data-whos-online-presence) also speaks for its reader, once per room however
 * many widgets show it: while the tab is visible, every data-whos-online-stay seconds it says
 * they are still on the page (the server's throttle makes most of these free), and as the page is
 * left it says they are gone (navigator.sendBeacon, which outlives the page). A reload or the
 * next page of the same room sends its own word: the leaving beacon is sent after the next page
 * was requested, so that page says "still here" once the beacon has been answered (a note in
 * sessionStorage tells it to), within the few seconds a leaving reader still counts.
 *
 * A room's URLs carry a token that runs out: before it does (data-whos-online-renew), or when the
 * server refuses it, the page is fetched again in the background for fresh ones (see renew).
 *
 * Where the server offers it (data-whos-online-stream, under ASGI) and the browser has
 * EventSource, the page follows its widgets on ONE stream instead of asking every interval: each
 * state the stream sends is the widgets view's answer, swapped in as a refresh's is, and the
 * widgets it carries are not polled while it is open (see follow). The page polls as before, at
 * once and until the stream is tried again, when it cannot be opened (204 under WSGI or with
 * LIVE_UPDATES off, an error), when it breaks, and while the server says it is stale (Redis is
 * down: the stream stays open, and its next state ends the polling). When a room token runs out
 * (event "end"), or when the page renews its tokens itself, the stream is opened again with
 * fresh ones. A stream that fails, or ends, within a minute of opening counts as a failure: the
 * next try waits 5 s, then twice as long each time, up to 5 minutes. A hidden tab closes its
 * stream (a browser opens only six connections per site over HTTP/1.1) and opens a new one when
 * shown again, whose first state is the current one. A stream that could not be opened is said
 * once in the console, unless the server said it has none to give (204).
 *
 * Navigations without a reload (window.whosOnline.pageView(), or every change of address with
 * data-whos-online-navigations): the page tells the page view view (data-whos-online-page-view)
 * that its reader went to another page, in the room of the widgets that came with it, or of the
 * page at that address, fetched in the background when none came (see the navigation part
 * below); never a page view the server took itself (its widgets carry data-whos-online-viewed),
 * and once per navigation. Widgets a script adds to the page are taken in as they come.
 */
(function () {
  "use strict";

  if (window.whosOnlineLive) {
    window.whosOnlineLive.scan(); // another tag's copy: the page's client is running already
    return;
  }

  var STARTED = "data-whos-online-started";
  var LIVE = "data-whos-online-live";
  var WIDGETS = "data-whos-online-widgets";
  var PRESENCE = "data-whos-online-presence";
  var RENEW = "data-whos-online-renew";
  var STREAM = "data-whos-online-stream";
  var PAGE_VIEW = "data-whos-online-page-view";
  var VIEWED = "data-whos-online-viewed";
  var NAVIGATIONS = "data-whos-online-navigations";
  var MAX_WIDGETS = 32; // the most one request of the widgets view answers (views.MAX_WIDGETS)

  var widgets = []; // the page's widgets: {element, renewAt, stopped, at, scanned}
  var timer = null;
  var busy = false; // a refresh, or the renewal before it, is under way

  var RETRY_FIRST = 5000; // ms before the stream is tried again after a first failure
  var RETRY_MOST = 300000; // and at most, however many failures follow
  var HEALTHY = 60000; // ms: a stream that lasted this long did not fail
  var stream = null; // the open stream: {source, url, widgets, queries, since, stale}
  var failures = 0; // streams that failed in a row
  var retryAt = 0; // no stream before then (Date.now())
  var retryTimer = null;
  var streamExplained = false; // the console said why a stream could not be opened

  function swap(element, html) {
    var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("[" + LIVE + "]");
    if (fresh) {
      take(element, fresh); // else not a widget (a login page, say): keep what is shown
    }
  }

  // ``element`` becomes ``fresh`` (a widget of an inert document): its attributes and content.
  function take(element, fresh) {
    Array.prototype.slice.call(element.attributes).forEach(function (attribute) {
      if (attribute.name !== STARTED && !fresh.hasAttribute(attribute.name)) {
        element.removeAttribute(attribute.name);
      }
    });
    Array.prototype.forEach.call(fresh.attributes, function (attribute) {
      element.setAttribute(attribute.name, attribute.value);
    });
    // Unchanged content stays as it is: a selection or a hovered link is not lost every refresh.
    if (fresh.innerHTML !== element.innerHTML) {
      element.replaceChildren.apply(element, Array.prototype.slice.call(fresh.childNodes));
    }
  }

  function withoutToken(url) {
    var parsed = new URL(url, window.location.href);
    parsed.searchParams.delete("token");
    return parsed.toString();
  }

  // When a widget's room token should be renewed, by this page's clock: the server says how many
  // seconds from its answer (data-whos-online-renew), well before the token runs out.
  function renewalDue(element) {
    var seconds = element.getAttribute(RENEW);
    return seconds === null ? Infinity : Date.now() + Number(seconds) * 1000;
  }

  // A room's URLs carry a token that runs out (ROOM_TOKEN_MAX_AGE): once the server refuses it,
  // or shortly before it runs out, the page is fetched again in the background (a request that
  // moves nobody), once for all the widgets in need, and each takes the fresh URLs of the same
  // widget from it. The page's own view decides, as it did the first time, whether its reader
  // may still see the room. Resolves to the widgets renewed.
  function renew(list) {
    return fetch(window.location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html", "X-Requested-With": "XMLHttpRequest" },
    })
      .then(function (response) {
        return response.ok ? response.text() : "";
      })
      .then(function (html) {
        var page = new DOMParser().parseFromString(html, "text/html");
        var candidates = Array.prototype.slice.call(page.querySelectorAll("[" + LIVE + "]"));
        return list.filter(function (widget) {
          if (!widget.element) {
            return false; // a room pageView() announced, which no widget of the page shows
          }
          var current = withoutToken(widget.element.getAttribute(LIVE));
          var fresh = candidates.filter(function (candidate) {
            return withoutToken(candidate.getAttribute(LIVE)) === current;
          })[0];
          if (!fresh) {
            return false;
          }
          [LIVE, PRESENCE, RENEW].forEach(function (name) {
            if (fresh.hasAttribute(name)) {
              widget.element.setAttribute(name, fresh.getAttribute(name));
            }
          });
          widget.renewAt = renewalDue(widget.element);
          return true;
        });
      })
      .catch(function () {
        return [];
      });
  }

  // The page no longer shows these widgets' rooms to its reader: they are left as they are.
  function stopAllBut(list, renewed) {
    list.forEach(function (widget) {
      if (renewed.indexOf(widget) < 0) {
        widget.stopped = true;
      }
    });
  }

  function queryOf(widget) {
    return new URL(widget.element.getAttribute(LIVE), window.location.href).search.slice(1);
  }

  // Each widget's answer, in the order of ``list`` (null for none): {status, ok, html}. The
  // widgets that name the widgets view are asked for in one request (several only past
  // MAX_WIDGETS different widgets), each different widget once.
  function ask(list) {
    var answers = list.map(function () {
      return null;
    });
    var groups = {}; // the widgets view's URL -> {queries: [...], positions: {query: [...]}}
    var requests = [];
    list.forEach(function (widget, position) {
      var endpoint = widget.element.getAttribute(WIDGETS);
      if (!endpoint) {
        requests.push(askAlone(widget, position, answers));
        return;
      }
      var group = groups[endpoint] || (groups[endpoint] = { queries: [], positions: {} });
      var query = queryOf(widget);
      if (!group.positions[query]) {
        group.positions[query] = [];
        group.queries.push(query);
      }
      group.positions[query].push(position);
    });
    Object.keys(groups).forEach(function (endpoint) {
      var group = groups[endpoint];
      for (var start = 0; start < group.queries.length; start += MAX_WIDGETS) {
        requests.push(askTogether(endpoint, group, group.queries.slice(start, start + MAX_WIDGETS), answers));
      }
    });
    return Promise.all(requests).then(function () {
      return answers;
    });
  }

  // The widgets view's (or the stream's) URL for these widgets' queries.
  function together(endpoint, queries) {
    return (
      endpoint +
      "?" +
      queries
        .map(function (query) {
          return "widget=" + encodeURIComponent(query);
        })
        .join("&")
    );
  }

  function askTogether(endpoint, group, queries, answers) {
    return fetch(together(endpoint, queries), {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    })
      .then(function (response) {
        return response.ok ? response.json() : null;
      })
      .then(function (body) {
        var found = (body && body.widgets) || [];
        queries.forEach(function (query, index) {
          group.positions[query].forEach(function (position) {
            answers[position] = found[index] || null;
          });
        });
      })
      .catch(function () {
        // Offline, a network error, or not the view's answer: keep showing the last counts.
      });
  }

  function askAlone(widget, position, answers) {
    return fetch(widget.element.getAttribute(LIVE), {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    })
      .then(function (response) {
        var answer = {
          status: response.status,
          ok: response.ok && response.headers.get("Whos-Online-Ok") !== "0",
        };
        answers[position] = answer;
        return answer.ok
          ? response.text().then(function (html) {
              answer.html = html;
            })
          : null;
      })
      .catch(function () {
        answers[position] = null;
      });
  }

  // Swaps each answer in (``answers`` in the order of ``list``, null for none), whether a
  // refresh or the stream brought them; returns the widgets whose token was refused.
  function apply(list, answers) {
    var refused = [];
    list.forEach(function (widget, position) {
      var answer = answers[position];
      if (!answer) {
        return;
      }
      if (answer.status === 403) {
        refused.push(widget);
      } else if (answer.status === 200 && answer.ok && typeof answer.html === "string") {
        swap(widget.element, answer.html);
        widget.renewAt = renewalDue(widget.element);
      }
    });
    return refused;
  }

  // Asks for ``list`` and swaps each answer in; a widget whose token was refused (another
  // session, after a login elsewhere; or a token run out) is renewed and asked for again at
  // once, unless it was just renewed.
  function refresh(list, renewed) {
    if (!list.length) {
      return Promise.resolve();
    }
    return ask(list).then(function (answers) {
      var refused = apply(list, answers);
      if (!refused.length || renewed) {
        return null;
      }
      return renew(refused).then(function (fresh) {
        stopAllBut(refused, fresh);
        return refresh(fresh, true);
      });
    });
  }

  function shown() {
    return widgets.filter(function (widget) {
      return !widget.stopped && widget.element.isConnected;
    });
  }

  // The shortest interval of the page's widgets, in milliseconds (Infinity for none).
  function interval() {
    return shown().reduce(function (shortest, widget) {
      var seconds = Math.max(Number(widget.element.getAttribute("data-whos-online-refresh")) || 30, 1);
      return Math.min(shortest, seconds * 1000);
    }, Infinity);
  }

  function schedule() {
    window.clearTimeout(timer);
    timer = null;
    var every = interval();
    if (!document.hidden && every !== Infinity) {
      timer = window.setTimeout(tick, every);
    }
  }

  // The widgets to ask for: all but those an open stream brings (unless it is stale).
  function polled() {
    return shown().filter(function (widget) {
      return !stream || stream.stale || stream.widgets.indexOf(widget) < 0;
    });
  }

  function tick() {
    timer = null;
    busy = true;
    var due = shown().filter(function (widget) {
      return Date.now() >= widget.renewAt;
    });
    var renewal = due.length
      ? renew(due).then(function (renewed) {
          stopAllBut(due, renewed);
        })
      : Promise.resolve();
    renewal
      .then(function () {
        follow(); // a stream of renewed widgets is opened again with their fresh tokens
        return refresh(polled(), false);
      })
      .catch(function () {
        // as in ask: keep showing the last counts
      })
      .then(function () {
        busy = false;
        schedule();
      });
  }

  // Polls at once, rather than at the end of an interval (which may be long where the stream
  // was expected to bring every change).
  function pollNow() {
    if (!busy && !document.hidden) {
      window.clearTimeout(timer);
      tick();
    }
  }

  // The widgets the page's one stream may follow: those that offer it, of its first endpoint,
  // each different query once and at most MAX_WIDGETS of them.
  function streamable() {
    var endpoint = null;
    var queries = [];
    var list = shown().filter(function (widget) {
      var offered = widget.element.getAttribute(STREAM);
      if (!offered || !widget.element.getAttribute(WIDGETS) || !widget.element.getAttribute(LIVE)) {
        return false;
      }
      endpoint = endpoint || offered;
      var query = queryOf(widget);
      if (offered !== endpoint || (queries.indexOf(query) < 0 && queries.length >= MAX_WIDGETS)) {
        return false;
      }
      if (queries.indexOf(query) < 0) {
        queries.push(query);
      }
      return true;
    });
    return { endpoint: endpoint, queries: queries, widgets: list };
  }

  // Opens the page's stream for the widgets that offer one, or opens it again where their URLs
  // changed (a renewal, new widgets); nothing while the tab is hidden, without EventSource, or
  // before the stream's next try.
  function follow() {
    if (!window.EventSource || document.hidden || Date.now() < retryAt) {
      return;
    }
    var wanted = streamable();
    var url = wanted.widgets.length ? together(wanted.endpoint, wanted.queries) : null;
    if (stream && stream.url === url) {
      return;
    }
    closeStream(false);
    if (url === null) {
      return;
    }
    var source = new window.EventSource(url);
    var current = {
      source: source,
      url: url,
      widgets: wanted.widgets,
      queries: wanted.queries,
      since: Date.now(),
      stale: false,
    };
    stream = current;

    source.addEventListener("message", function (event) {
      if (stream !== current) {
        return;
      }
      var body = null;
      try {
        body = JSON.parse(event.data);
      } catch (error) {
        return; // not the widgets view's answer: keep showing the last counts
      }
      var found = (body && body.widgets) || [];
      current.stale = false;
      var refused = apply(
        current.widgets,
        current.widgets.map(function (widget) {
          return found[current.queries.indexOf(queryOf(widget))] || null;
        })
      );
      if (refused.length) {
        // A token refused when the stream opened (a tab hidden for long): renewed as a
        // refresh's would be, and the stream opened again with the fresh one.
        reopen(current);
      }
    });
    source.addEventListener("stale", function () {
      // Redis cannot be read: the stream stays open (its next state says it is back), and the
      // page polls meanwhile.
      if (stream === current && !current.stale) {
        current.stale = true;
        pollNow();
      }
    });
    source.addEventListener("end", function () {
      if (stream === current) {
        reopen(current);
      }
    });
    source.addEventListener("open", function () {
      current.opened = true;
    });
    source.addEventListener("error", function () {
      // Not opened (204, another status, not an event stream), or cut off: EventSource would
      // reconnect on its own every few seconds for as long as it fails; the page polls instead,
      // and tries a stream again later.
      if (stream === current) {
        if (!current.opened) {
          explainStream(url);
        }
        closeStream(true);
        pollNow();
      }
    });
  }

  // A stream that could not be opened: the console says why, once per page, unless the server
  // said it has none to give (204: under WSGI, or with LIVE_UPDATES off), where the page polls
  // as it should. EventSource does not tell the status; one request of the stream's URL does
  // (dropped as soon as it is answered).
  function explainStream(url) {
    if (streamExplained || !window.AbortController) {
      return;
    }
    streamExplained = true;
    var path = url.split("?")[0];
    var abort = new AbortController();
    fetch(url, { credentials: "same-origin", signal: abort.signal })
      .then(function (response) {
        abort.abort();
        if (response.status !== 204) {
          var why = response.ok ? "it broke at once" : "it answered " + response.status;
          warn("the live stream (" + path + ") could not be opened: " + why + "; the widgets poll instead");
        }
      })
      .catch(function () {
        warn("the live stream (" + path + ") could not be reached; the widgets poll instead");
      });
  }

  // Closes the stream. After a failure the next one is tried only after a back-off, polling
  // meanwhile; a stream that lasted HEALTHY first wipes out the failures before it.
  function closeStream(failed) {
    if (!stream) {
      return;
    }
    stream.source.close();
    if (Date.now() - stream.since >= HEALTHY) {
      failures = 0;
    }
    stream = null;
    if (failed) {
      failures += 1;
      var wait = Math.min(RETRY_FIRST * Math.pow(2, failures - 1), RETRY_MOST);
      retryAt = Date.now() + wait;
      window.clearTimeout(retryTimer);
      retryTimer = window.setTimeout(function () {
        retryAt = 0;
        follow();
      }, wait);
    }
  }

  // The stream ended (a token ran out) or refused a token: its widgets are renewed, then
  // followed on a new stream, or polled while it waits for its next try. One that does so
  // within HEALTHY of opening counts as a failure, lest a token refused again and again make
  // a loop of it.
  function reopen(current) {
    var list = current.widgets;
    closeStream(Date.now() - current.since < HEALTHY);
    renew(list).then(function (renewed) {
      stopAllBut(list, renewed);
      follow();
      if (!stream) {
        pollNow();
      }
    });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      closeStream(false); // opened again when the tab is shown
      return;
    }
    follow();
    if (timer === null && !busy) {
      tick();
    }
  });
  window.addEventListener("pagehide", function () {
    closeStream(false);
  });
  window.addEventListener("pageshow", function (event) {
    if (event.persisted) {
      follow(); // back from the back/forward cache
    }
  });

  var ROOMS = {}; // a room's presence URL, without its token -> the widgets that show the room
  var LEFT = "whos-online-left";

  function leftJustNow(url) {
    try {
      var note = JSON.parse(window.sessionStorage.getItem(LEFT) || "null");
      window.sessionStorage.removeItem(LEFT);
      return note !== null && note.url === url && Date.now() - note.at < 30000;
    } catch (error) {
      return false; // storage refused (a privacy mode): the periodic word still comes
    }
  }

  function noteLeaving(url) {
    try {
      window.sessionStorage.setItem(LEFT, JSON.stringify({ url: url, at: Date.now() }));
    } catch (error) {
      // as above
    }
  }

  // A room is spoken for by the page's widgets that show it, and by a room pageView() announced
  // (a speaker without an element): while one of them is still on the page, and, once the page
  // follows its own navigations, while the page is still at the address it was shown at.
  function presenceOf(speaker) {
    return speaker.element ? speaker.element.getAttribute(PRESENCE) : speaker.presence;
  }

  function speaking(speaker) {
    var onPage = !speaker.stopped && (!speaker.element || speaker.element.isConnected);
    return onPage && (!following || speaker.at.split("?")[0] === window.location.pathname);
  }

  // One word per room however many of the page's widgets show it: the first speaker of a room
  // sets its timer and its leaving beacon, the others only join its list.
  function speakFor(speaker, seconds) {
    var first = presenceOf(speaker);
    if (!first) {
      return;
    }
    var key = withoutToken(first);
    if (ROOMS[key]) {
      if (ROOMS[key].indexOf(speaker) < 0) {
        ROOMS[key].push(speaker);
      }
      return;
    }
    var speakers = (ROOMS[key] = [speaker]);
    var stayFor = speaker.element && speaker.element.getAttribute("data-whos-online-stay");
    var every = Math.max(Number(seconds || stayFor) || 60, 5) * 1000;

    function active() {
      return speakers.filter(function (one) {
        return speaking(one) && withoutToken(presenceOf(one) || "") === key;
      });
    }

    function url() {
      // A speaker's own, renewed with its token (see renew); null once none speaks.
      var now = active();
      return now.length ? presenceOf(now[0]) : null;
    }

    function stay() {
      var presence = url();
      if (presence && !document.hidden) {
        fetch(presence, { method: "POST", credentials: "same-origin" })
          .then(function (response) {
            if (response.status === 403) {
              renew(active()).then(function (renewed) {
                if (renewed.length) {
                  fetch(url(), { method: "POST", credentials: "same-origin" }).catch(function () {});
                }
              });
            }
          })
          .catch(function () {
            // Offline: the next word, or the next page, says it again.
          });
      }
    }

    window.setInterval(stay, every);
    document.addEventListener("visibilitychange", stay);
    window.addEventListener("pageshow", function (event) {
      if (event.persisted) {
        stay(); // back from the back/forward cache, after its leaving word
      }
    });
    window.addEventListener("pagehide", function () {
      var presence = url();
      if (presence && navigator.sendBeacon && navigator.sendBeacon(presence + "&leave=1")) {
        noteLeaving(key);
      }
    });
    if (leftJustNow(key)) {
      // After the leaving word has been answered, which spends the throttle cookie that would
      // spare this word its write.
      window.setTimeout(stay, 1500);
    }
  }

  // Navigations without a reload. A page view the server took (a boosted request's page, a
  // Turbo visit's) comes with widgets that carry its mark; any other navigation is announced
  // to the page view view (data-whos-online-page-view), once per navigation, in the room of
  // the widgets that came with the new page, or, when none did (the page's script swapped in a
  // part without one), of those of the page at the new address, fetched in the background (a
  // request that moves nobody), whose URLs and content the page's widgets then take in their
  // order. Announced by pageView(), or on every change of address with navigations=True.
  var following = false; // the page follows its own navigations
  var hooked = false; // history.pushState and replaceState are followed (navigations=True)
  var lastPlace = place(); // where the page was when its address last changed
  var endpoint = null; // the page view view's URL, from the first widget that has it
  var marks = []; // {mark, at, burst} of page views the server took, not yet matched
  var seenMarks = {}; // every mark seen: a page restored from a cache shows old ones
  var burst = 0; // navigations in a row without a pause make one, announced once
  var pending = null; // the timer of the burst's announcement
  var decided = 0; // when the last navigation was decided (Date.now())
  var changed = 0; // when the page last changed: an address, or a widget taken in
  var SETTLED = 150; // ms without a change before a navigation is decided
  var LONGEST = 10000; // ms a navigation waits at most for its page (Turbo: aria-busy)

  function place() {
    return window.location.pathname + window.location.search;
  }

  function noteMark(element, at) {
    var mark = element.getAttribute(VIEWED);
    if (mark && !seenMarks[mark]) {
      seenMarks[mark] = true;
      marks.push({ mark: mark, at: at, burst: burst });
    }
  }

  // Once the page has settled (no change for SETTLED ms, and no Turbo visit under way), decide;
  // a later navigation replaces the wait, and what waited is dropped (``dropped``).
  var drop = null;

  function whenSettled(then, dropped) {
    var started = Date.now();
    window.clearTimeout(pending);
    if (drop) {
      drop();
    }
    drop = dropped || null;
    (function check() {
      var busy = document.documentElement.hasAttribute("aria-busy");
      var quiet = Date.now() - changed >= SETTLED;
      if ((busy || !quiet) && Date.now() - started < LONGEST) {
        pending = window.setTimeout(check, 50);
        return;
      }
      pending = null;
      drop = null;
      then();
    })();
  }

  // The address changed (pushState, a new place by replaceState, the back button).
  function navigated() {
    lastPlace = place();
    if (pending === null) {
      burst += 1; // a new navigation: the marks of those before it are not its own
    }
    changed = Date.now();
    var at = place();
    whenSettled(function () {
      if (place() === at) {
        decide(at, false);
      }
    });
  }

  // Whether the server took the page view of ``at`` (see noteMark): a mark that came during
  // the navigation's burst (whose address may have changed since, as a redirect's does), or,
  // for one the page's script announces, since the last, with a widget shown at ``at``. Either
  // way the marks are spent.
  function taken(at, inBurst) {
    var found = marks.some(function (one) {
      return inBurst ? one.burst === burst : one.at === at;
    });
    marks = [];
    return found;
  }

  // Tells the page's own scripts what became of a navigation: a "whos-online:page-view" event
  // on the document, whose detail says its address and whether it was announced (false for one
  // the server took, or that could not be).
  function told(at, recording) {
    return recording.then(function (announced) {
      document.dispatchEvent(
        new CustomEvent("whos-online:page-view", { detail: { url: at, announced: announced } })
      );
      return announced;
    });
  }

  function decide(at, explicit) {
    return told(at, decideNow(at, explicit));
  }

  function decideNow(at, explicit) {
    var since = decided;
    decided = Date.now();
    if (taken(at, !explicit)) {
      return Promise.resolve(false);
    }
    var fresh = shown().filter(function (widget) {
      return widget.at === at && widget.scanned >= since;
    });
    var room = fresh.length ? Promise.resolve(firstPresence(fresh)) : adopt(at);
    return room.then(function (presence) {
      if (presence === undefined || place() !== at) {
        return false; // no page there (an error): no page view, as a 404 is none
      }
      return announce(presence ? presence.slice(presence.indexOf("?") + 1) : "");
    });
  }

  // The presence URL of the first of ``list`` that shows a room ("" for none).
  function firstPresence(list) {
    for (var index = 0; index < list.length; index += 1) {
      var presence = presenceOf(list[index]);
      if (presence) {
        return presence;
      }
    }
    return "";
  }

  // The page is at ``at``, but none of its widgets came with it: the page at that address,
  // fetched in the background, gives them their URLs and content, in their order. Resolves to
  // the presence URL of its room ("" for none), or undefined when it could not be had.
  function adopt(at) {
    return fetch(window.location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html", "X-Requested-With": "XMLHttpRequest" },
    })
      .then(function (response) {
        return response.ok ? response.text() : undefined;
      })
      .then(function (html) {
        if (html === undefined || place() !== at) {
          return undefined;
        }
        var page = new DOMParser().parseFromString(html, "text/html");
        var candidates = page.querySelectorAll("[" + LIVE + "]");
        shown().forEach(function (widget, index) {
          if (!candidates[index]) {
            widget.stopped = true; // the new page has no such widget
            return;
          }
          take(widget.element, candidates[index]);
          widget.at = at;
          widget.scanned = Date.now();
          widget.renewAt = renewalDue(widget.element);
          speakFor(widget);
        });
        follow();
        var presence = "";
        Array.prototype.some.call(candidates, function (candidate) {
          presence = candidate.getAttribute(PRESENCE) || "";
          return presence;
        });
        return presence;
      })
      .catch(function () {
        return undefined;
      });
  }

  // Tells the page view view; resolves to whether it was recorded. A room with no widget of
  // the page is spoken for as a widget's would be, from the URL the answer gives.
  function announce(query) {
    if (!endpoint) {
      warn("pageView() needs a live widget rendered by whos_online (data-whos-online-page-view)");
      return Promise.resolve(false);
    }
    var at = place();
    return fetch(endpoint + (query ? "?" + query : ""), {
      method: "POST",
      credentials: "same-origin",
    })
      .then(function (response) {
        return response.ok ? response.json() : null;
      })
      .then(function (body) {
        if (!body) {
          return false;
        }
        if (body.presence && !speaksHere(body.presence)) {
          speakFor({ element: null, presence: body.presence, at: at, stopped: false }, body.stay);
        }
        return true;
      })
      .catch(function () {
        return false;
      });
  }

  // Whether a widget at this address already speaks for the room of ``presence``.
  function speaksHere(presence) {
    var key = withoutToken(presence);
    return (ROOMS[key] || []).some(function (speaker) {
      return speaker.element && speaking(speaker);
    });
  }

  // The page's script says it shows another page: pageView() for the address it shows now, its
  // room told by the widgets that came with it (or fetched, see adopt); pageView({room, token})
  // for a room of the site's own (its token from whos_online.room_token), pageView({room: null})
  // for none. Resolves to whether a page view was recorded (false for one the server took).
  function pageView(options) {
    following = true;
    var at = place();
    if (!options || !("room" in options)) {
      return new Promise(function (resolve) {
        whenSettled(
          function () {
            resolve(decide(at, true));
          },
          function () {
            resolve(told(at, Promise.resolve(false))); // another navigation came first
          }
        );
      });
    }
    window.clearTimeout(pending);
    pending = null;
    if (drop) {
      drop();
      drop = null;
    }
    decided = Date.now();
    if (taken(at, false)) {
      return told(at, Promise.resolve(false));
    }
    var room = options.room;
    var query = room
      ? "room=" + encodeURIComponent(room) + "&token=" + encodeURIComponent(options.token || "")
      : "";
    return told(at, announce(query));
  }

  // navigations=True: every change of address is a navigation, announced once the page has
  // settled. Hash changes are none, nor is a replaceState that keeps the path (a filter, a
  // tracking parameter taken off).
  function followHistory() {
    if (hooked) {
      return;
    }
    hooked = following = true;
    ["pushState", "replaceState"].forEach(function (name) {
      var original = history[name];
      history[name] = function () {
        var path = window.location.pathname;
        var search = window.location.search;
        var result = original.apply(this, arguments);
        if (
          window.location.pathname !== path ||
          (name === "pushState" && window.location.search !== search)
        ) {
          navigated();
        }
        lastPlace = place();
        return result;
      };
    });
    window.addEventListener("popstate", function () {
      if (place() !== lastPlace) {
        navigated();
      }
    });
  }

  var warned = {};

  // One warning per page and subject, in the console, where a site's developer looks.
  function warn(subject) {
    if (!warned[subject]) {
      warned[subject] = true;
      console.warn("whos_online: " + subject + ".");
    }
  }

  var known = new WeakSet(); // the widgets taken in (a copy of one, as a cache restores, is new)

  // Forgets the widgets no longer on the page (a page a script swapped out): a widget put back
  // later is taken in again.
  function prune() {
    widgets = widgets.filter(function (widget) {
      if (widget.element.isConnected) {
        return true;
      }
      known.delete(widget.element);
      return false;
    });
    Object.keys(ROOMS).forEach(function (key) {
      var kept = ROOMS[key].filter(function (speaker) {
        return !speaker.element || speaker.element.isConnected;
      });
      ROOMS[key].length = 0;
      Array.prototype.push.apply(ROOMS[key], kept);
    });
  }

  // Takes in the widgets of the page not seen yet; a shorter interval than the page had so far
  // takes effect at once.
  function scan() {
    prune();
    var added = false;
    Array.prototype.forEach.call(document.querySelectorAll("[" + LIVE + "]"), function (element) {
      if (known.has(element)) {
        return;
      }
      known.add(element);
      element.setAttribute(STARTED, "");
      var at = place();
      var widget = {
        element: element,
        renewAt: renewalDue(element),
        stopped: false,
        at: at,
        scanned: Date.now(),
      };
      widgets.push(widget);
      endpoint = endpoint || element.getAttribute(PAGE_VIEW);
      noteMark(element, at);
      if (element.hasAttribute(NAVIGATIONS)) {
        followHistory();
      }
      speakFor(widget);
      added = true;
    });
    if (added) {
      changed = Date.now();
      follow();
    }
    if (added && !busy) {
      schedule();
    }
  }

  // Widgets a script adds later (a fragment, a page swapped in) are taken in as they come.
  function watch() {
    new MutationObserver(function (records) {
      var found = records.some(function (record) {
        return Array.prototype.some.call(record.addedNodes, function (node) {
          return (
            node.nodeType === 1 &&
            (node.hasAttribute(LIVE) || node.querySelector("[" + LIVE + "]") !== null)
          );
        });
      });
      if (found) {
        scan();
      }
    }).observe(document.documentElement, { childList: true, subtree: true });
  }

  window.whosOnline = { scan: scan, pageView: pageView };
  window.whosOnlineLive = window.whosOnline; // its name before pageView()
  scan();
  watch();
})();
