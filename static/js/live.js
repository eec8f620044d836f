// Live updates: one websocket per page, subscribed to the topics in <body data-live-topics>.
// Every message (and every (re)connect, to catch up on what was missed) fires the DOM event
// "live" on <body>; the page's partials listen with hx-trigger="live from:body" and re-fetch
// themselves, so the server stays the only place that renders anything. The indicator in
// the top bar says whether the page is live; the socket reconnects by itself with backoff.
(function () {
  "use strict";
  var topics = document.body.dataset.liveTopics;
  var badge = document.getElementById("live-status");
  if (!topics || !badge) return;
  var text = badge.querySelector(".live-text");
  var delay = 500;
  var timer = null;

  function show(state, words) {
    badge.dataset.state = state;
    text.textContent = words;
  }

  function fire(detail) {
    detail = detail || {};
    document.body.dispatchEvent(new CustomEvent("live", { detail: detail }));
    // Also by kind ("live-notification"), for elements that care about one kind only.
    if (detail.kind) {
      document.body.dispatchEvent(new CustomEvent("live-" + detail.kind, { detail: detail }));
    }
    // And "live-phase-changed" on each element showing a domain in another phase than this
    // message's (<… data-live-phase="Ready">). hx-trigger filters (`live[…]`) would need
    // eval, which the Content-Security-Policy forbids.
    if (detail.kind === "domain" && detail.phase) {
      document.querySelectorAll("[data-live-phase]").forEach(function (el) {
        if (el.dataset.livePhase !== detail.phase) {
          el.dispatchEvent(new CustomEvent("live-phase-changed", { detail: detail }));
        }
      });
    }
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + location.host + "/ws/live/?topics=" + encodeURIComponent(topics);
    var ws;
    show("connecting", "Connecting…");
    try {
      ws = new WebSocket(url);
    } catch (e) {
      retry();
      return;
    }
    ws.onopen = function () {
      delay = 500;
      show("live", "Live");
      fire({ kind: "connected" });
    };
    ws.onmessage = function (msg) {
      var data = {};
      try { data = JSON.parse(msg.data); } catch (e) { return; }
      if (data.kind === "hello") return;
      fire(data);
    };
    ws.onclose = function () {
      retry();
    };
  }

  function retry() {
    if (timer) return;
    show("reconnecting", "Reconnecting…");
    timer = setTimeout(function () {
      timer = null;
      connect();
    }, delay);
    delay = Math.min(delay * 2, 10000);
  }

  connect();
})();

// Copy buttons: <button data-copy="#id"> copies the text of that element.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (!button) return;
  var source = document.querySelector(button.dataset.copy);
  if (!source) return;
  var value = source.textContent;
  var done = function () {
    var note = button.parentElement.querySelector(".copy-note");
    if (note) note.textContent = "Copied to the clipboard.";
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(value).then(done);
  } else {
    var area = document.createElement("textarea");
    area.value = value;
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
    done();
  }
});
