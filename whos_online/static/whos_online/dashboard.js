/* Refreshes the whos_online dashboard below its header every data-whos-online-refresh seconds,
 * by fetching the same part of the page rendered by the server and swapping it in. No inline
 * script, so a strict Content-Security-Policy allows it. Refreshes pause while the tab is hidden.
 */
(function () {
  "use strict";
  var root = document.querySelector("[data-whos-online-dashboard]");
  if (!root || root.hasAttribute("data-whos-online-started")) {
    return;
  }
  root.setAttribute("data-whos-online-started", "");
  var url = root.getAttribute("data-whos-online-dashboard");
  var every = Math.max(Number(root.getAttribute("data-whos-online-refresh")) || 30, 1) * 1000;
  var timer = null;
  var stopped = false;

  function schedule() {
    window.clearTimeout(timer);
    timer = document.hidden || stopped ? null : window.setTimeout(refresh, every);
  }

  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        // Refused: the session ended or lost its staff status. Keep what is shown, and stop
        // asking until the page is loaded again.
        if (response.status === 403) {
          stopped = true;
        }
        if (!response.ok || response.redirected) {
          throw new Error("dashboard refresh: HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        root.innerHTML = html;
        root.classList.remove("wo-stale");
      })
      .catch(function () {
        root.classList.add("wo-stale");
      })
      .then(schedule);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && timer === null && !stopped) {
      refresh();
    }
  });
  schedule();
})();
