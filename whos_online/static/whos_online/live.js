/* Refreshes every {% whos_online live=True %} widget on the page from whos_online's JSON view.
 *
 * Progressive enhancement: the server renders the widget complete; this script only rewrites its
 * counts and sentence in place every data-whos-online-refresh seconds, with the words the server
 * put in data-whos-online-text (already translated). Names are written as text, never as markup.
 * An answer with "ok": false (Redis unavailable) or a failed request leaves the widget as it is.
 * Refreshes pause while the tab is hidden. No inline script, so a strict CSP allows it; loading
 * it twice (two widgets) starts each widget once.
 */
(function () {
  "use strict";

  var language = document.documentElement.lang || undefined;
  var rules = null;
  try {
    rules = new Intl.PluralRules(language);
  } catch (error) {
    rules = null;
  }

  function format(phrase, values) {
    return phrase.replace(/%\((\w+)\)[sd]/g, function (placeholder, name) {
      return Object.prototype.hasOwnProperty.call(values, name) ? String(values[name]) : placeholder;
    });
  }

  // forms is [one, other], as the server wrote them for 1 and for 2.
  function plural(forms, count) {
    var one = rules ? rules.select(count) === "one" : count === 1;
    return format(one ? forms[0] : forms[1], { count: count, total: count, visitors: count });
  }

  function sentence(data, text) {
    var parts = [];
    if (Array.isArray(data.names)) {
      data.names.forEach(function (person) {
        var element = document.createElement(person.url ? "a" : "span");
        element.className = "whos-online-user";
        element.dir = "auto"; // isolates the name's direction from the sentence around it
        element.textContent = person.name;
        if (person.url) {
          element.setAttribute("href", person.url);
        }
        parts.push(element);
      });
      if (data.more) {
        parts.push(plural(text.more, data.more));
      }
    } else if (data.users) {
      parts.push(plural(text.users, data.users));
    }
    if (data.guests) {
      parts.push(plural(text.guests, data.guests));
    }
    if (data.bots) {
      parts.push(plural(text.bots, data.bots));
    }
    if (!parts.length) {
      parts.push(data.total ? plural(text.people, data.total) : text.nobody);
    }
    var nodes = [];
    parts.forEach(function (part, index) {
      if (index > 0) {
        nodes.push(index === parts.length - 1 ? " " + text.and + " " : ", ");
      }
      nodes.push(part);
    });
    return nodes;
  }

  function update(widget, data, text) {
    ["users", "guests", "bots", "total"].forEach(function (kind) {
      widget.setAttribute("data-" + kind, String(data[kind]));
    });
    var list = widget.querySelector(".whos-online-list");
    if (list) {
      list.textContent = "";
      sentence(data, text).forEach(function (node) {
        list.append(node);
      });
    }
    var visitors = widget.querySelector(".whos-online-visitors");
    if (visitors) {
      visitors.setAttribute("data-visitors", String(data.visitors_today));
      visitors.textContent = plural(text.visitors, data.visitors_today);
    }
    var peak = widget.querySelector(".whos-online-peak");
    var people = String(data.peak.people);
    if (peak && data.peak.when && peak.getAttribute("data-peak") !== people) {
      var when = Date.parse(data.peak.when);
      // A peak beaten today reads as the server writes it (DATE_FORMAT); another day, which only
      // a page open across midnight sees, gets the browser's long date.
      var day =
        when >= text.today[0] && when < text.today[1]
          ? text.today[2]
          : new Date(when).toLocaleDateString(language, { dateStyle: "long" });
      peak.setAttribute("data-peak", people);
      peak.textContent = format(text.peak, { people: people, day: day });
      peak.hidden = false;
    }
  }

  function start(widget) {
    if (widget.hasAttribute("data-whos-online-started")) {
      return;
    }
    widget.setAttribute("data-whos-online-started", "");
    var url = widget.getAttribute("data-whos-online-live");
    var every = Math.max(Number(widget.getAttribute("data-whos-online-refresh")) || 30, 1) * 1000;
    var text = JSON.parse(widget.getAttribute("data-whos-online-text"));
    var timer = null;

    function schedule() {
      window.clearTimeout(timer);
      timer = document.hidden ? null : window.setTimeout(refresh, every);
    }

    function refresh() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          return response.ok ? response.json() : null;
        })
        .then(function (data) {
          if (data && data.ok) {
            update(widget, data, text);
          }
        })
        .catch(function () {
          // Offline or a network error: keep showing the last counts.
        })
        .then(schedule);
    }

    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && timer === null) {
        refresh();
      }
    });
    schedule();
  }

  Array.prototype.forEach.call(document.querySelectorAll("[data-whos-online-live]"), start);
})();
