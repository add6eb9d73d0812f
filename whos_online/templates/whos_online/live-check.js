/* Says in the console when the live widget's script did not load.
 *
 * The tag renders this script after live.js. live.js is one of the site's static files, which
 * a site may not serve (under ASGI Django serves none of them); this one comes from one of
 * whos_online's views (whos_online:live_check), which Django serves wherever the widget's
 * refreshes come from. Once the page has loaded, it looks for the client live.js starts: if
 * there is none, the widgets stay as the page showed them, and the console says so, once.
 * No inline script, so a strict CSP allows it.
 */
(function () {
  "use strict";

  if (window.whosOnlineLiveCheck) {
    return; // another tag's copy
  }
  window.whosOnlineLiveCheck = true;

  function check() {
    if (window.whosOnlineLive) {
      return;
    }
    var script = document.querySelector("script[data-whos-online-script]");
    console.warn(
      "whos_online: the live widget's script did not load" +
        (script ? " from " + script.src : "") +
        ", so the widgets stay as the page showed them. Does the site serve its static files? " +
        "Under ASGI Django serves none: see whos_online's docs, Live updates, Static files."
    );
  }

  if (document.readyState === "complete") {
    window.setTimeout(check, 3000); // added to a page already loaded: give live.js its time
  } else {
    window.addEventListener("load", check);
  }
})();
