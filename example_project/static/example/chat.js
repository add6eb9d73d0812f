/* The chat's WebSocket: sends what the form says, shows what everyone says. While it is open,
 * the server holds its person in the chat's room (whos_online.channels.PresenceMixin); the
 * widget above the messages shows who is in it. */
(function () {
  "use strict";
  var form = document.getElementById("chat-form");
  if (!form) {
    return;
  }
  var messages = document.getElementById("chat-messages");
  var input = document.getElementById("chat-text");
  var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  var socket = new WebSocket(scheme + window.location.host + form.getAttribute("data-socket"));
  socket.addEventListener("open", function () {
    form.setAttribute("data-state", "open");
  });
  socket.addEventListener("close", function () {
    form.setAttribute("data-state", "closed");
  });
  socket.addEventListener("message", function (event) {
    var said = JSON.parse(event.data);
    var item = document.createElement("li");
    var author = document.createElement("strong");
    author.textContent = said.author + ": ";
    item.appendChild(author);
    item.appendChild(document.createTextNode(said.text));
    messages.appendChild(item);
  });
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (input.value.trim() && socket.readyState === WebSocket.OPEN) {
      socket.send(input.value);
      input.value = "";
    }
  });
})();
