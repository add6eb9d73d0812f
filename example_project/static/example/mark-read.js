/* Marks the topic read once its page has loaded: a request the page makes itself, such as a
 * forum's bookmark or "mark as read" POST. It keeps its reader online, and in the topic's room:
 * only page views move people between rooms. */
(function () {
  "use strict";
  var marker = document.getElementById("mark-read");
  if (!marker) {
    return;
  }
  fetch(marker.getAttribute("data-url"), {
    method: "POST",
    credentials: "same-origin",
    headers: { "X-CSRFToken": marker.getAttribute("data-csrf") },
  }).catch(function () {
    // Offline: nothing to do.
  });
})();
