/* Refreshes every {% whos_online live=True %} widget on the page from whos_online's widget view.
 *
 * Progressive enhancement: the server renders the widget complete; every data-whos-online-refresh
 * seconds this script fetches the same widget rendered anew by the server (the site's own
 * whos_online/online.html, in the page's language) and swaps its content in. The answer is parsed
 * as an inert document, so nothing in it runs; only the element carrying data-whos-online-live is
 * taken from it. An answer saying Redis cannot be read (Whos-Online-Ok: 0) or a failed request
 * leaves the widget as it is. Refreshes pause while the tab is hidden. No inline script, so a
 * strict CSP allows it; loading it twice (two widgets) starts each widget once.
 *
 * A room's widget (data-whos-online-presence) also speaks for its reader: while the tab is
 * visible, every data-whos-online-stay seconds it says they are still on the page (the server's
 * throttle makes most of these free), and as the page is left it says they are gone
 * (navigator.sendBeacon, which outlives the page). A reload or the next page of the same room
 * sends its own word: the leaving beacon is sent after the next page was requested, so that page
 * says "still here" once the beacon has been answered (a note in sessionStorage tells it to),
 * within the few seconds a leaving reader still counts.
 *
 * A room's URLs carry a token that runs out: before it does (data-whos-online-renew), or when the
 * server refuses it, the page is fetched again in the background for fresh ones (see renew).
 */
(function () {
  "use strict";

  var STARTED = "data-whos-online-started";

  function swap(widget, html) {
    var fresh = new DOMParser()
      .parseFromString(html, "text/html")
      .querySelector("[data-whos-online-live]");
    if (!fresh) {
      return; // not a widget (a login page, say): keep what is shown
    }
    Array.prototype.slice.call(widget.attributes).forEach(function (attribute) {
      if (attribute.name !== STARTED && !fresh.hasAttribute(attribute.name)) {
        widget.removeAttribute(attribute.name);
      }
    });
    Array.prototype.forEach.call(fresh.attributes, function (attribute) {
      widget.setAttribute(attribute.name, attribute.value);
    });
    // Unchanged content stays as it is: a selection or a hovered link is not lost every refresh.
    if (fresh.innerHTML !== widget.innerHTML) {
      widget.replaceChildren.apply(widget, Array.prototype.slice.call(fresh.childNodes));
    }
  }

  function withoutToken(url) {
    var parsed = new URL(url, window.location.href);
    parsed.searchParams.delete("token");
    return parsed.toString();
  }

  // A room's URLs carry a token that runs out (ROOM_TOKEN_MAX_AGE): once the server refuses it,
  // the page is fetched again in the background (a request that moves nobody), and the fresh
  // URLs of the same widget are taken from it. The page's own view decides, as it did the first
  // time, whether its reader may still see the room. Calls back with whether it worked.
  function renew(widget, done) {
    var current = widget.getAttribute("data-whos-online-live");
    fetch(window.location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html", "X-Requested-With": "XMLHttpRequest" },
    })
      .then(function (response) {
        return response.ok ? response.text() : "";
      })
      .then(function (html) {
        var page = new DOMParser().parseFromString(html, "text/html");
        var fresh = Array.prototype.filter.call(
          page.querySelectorAll("[data-whos-online-live]"),
          function (candidate) {
            var url = candidate.getAttribute("data-whos-online-live");
            return withoutToken(url) === withoutToken(current);
          }
        )[0];
        if (!fresh) {
          done(false);
          return;
        }
        ["data-whos-online-live", "data-whos-online-presence", "data-whos-online-renew"].forEach(function (name) {
          if (fresh.hasAttribute(name)) {
            widget.setAttribute(name, fresh.getAttribute(name));
          }
        });
        done(true);
      })
      .catch(function () {
        done(false);
      });
  }

  function start(widget) {
    if (widget.hasAttribute(STARTED)) {
      return;
    }
    widget.setAttribute(STARTED, "");
    var every = Math.max(Number(widget.getAttribute("data-whos-online-refresh")) || 30, 1) * 1000;
    var timer = null;
    var stopped = false;
    var renewAt = renewalDue();

    // When the room's token should be renewed, by this page's clock: the server says how many
    // seconds from its answer (data-whos-online-renew), well before the token runs out.
    function renewalDue() {
      var seconds = widget.getAttribute("data-whos-online-renew");
      return seconds === null ? Infinity : Date.now() + Number(seconds) * 1000;
    }

    function schedule() {
      window.clearTimeout(timer);
      timer = document.hidden || stopped ? null : window.setTimeout(refresh, every);
    }

    function renewThenRefresh() {
      renew(widget, function (worked) {
        if (worked) {
          renewAt = renewalDue();
          refresh(true);
        } else {
          stopped = true; // the page no longer shows this room to its reader
        }
      });
    }

    function refresh(renewed) {
      if (!renewed && Date.now() >= renewAt) {
        renewThenRefresh();
        return;
      }
      var url = widget.getAttribute("data-whos-online-live");
      fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then(function (response) {
          if (response.status === 403 && !renewed) {
            return "renew"; // another session (a login elsewhere), or a token run out
          }
          var read = response.ok && response.headers.get("Whos-Online-Ok") !== "0";
          return read ? response.text() : null;
        })
        .then(function (html) {
          if (html === "renew") {
            renewThenRefresh();
            return;
          }
          if (html !== null) {
            swap(widget, html);
            renewAt = renewalDue();
          }
          schedule();
        })
        .catch(function () {
          // Offline or a network error: keep showing the last counts.
          schedule();
        });
    }

    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && timer === null && !stopped) {
        refresh();
      }
    });
    schedule();
  }

  var PRESENT = {}; // presence URLs already spoken for, so that two widgets send one word
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

  function speakFor(widget) {
    var first = widget.getAttribute("data-whos-online-presence");
    if (!first || PRESENT[withoutToken(first)]) {
      return;
    }
    var key = withoutToken(first);
    PRESENT[key] = true;
    var every = Math.max(Number(widget.getAttribute("data-whos-online-stay")) || 60, 5) * 1000;

    function url() {
      // The widget's own, renewed with its token (see renew).
      return widget.getAttribute("data-whos-online-presence") || first;
    }

    function stay() {
      if (!document.hidden) {
        fetch(url(), { method: "POST", credentials: "same-origin" })
          .then(function (response) {
            if (response.status === 403) {
              renew(widget, function (worked) {
                if (worked) {
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
      if (navigator.sendBeacon && navigator.sendBeacon(url() + "&leave=1")) {
        noteLeaving(key);
      }
    });
    if (leftJustNow(key)) {
      // After the leaving word has been answered, which spends the throttle cookie that would
      // spare this word its write.
      window.setTimeout(stay, 1500);
    }
  }

  Array.prototype.forEach.call(document.querySelectorAll("[data-whos-online-live]"), function (widget) {
    start(widget);
    speakFor(widget);
  });
})();
