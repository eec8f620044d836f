// Small page behaviours, kept out of the templates so the pages run under a strict
// Content-Security-Policy (no inline scripts, no inline event handlers).
(function () {
  "use strict";

  // <form data-confirm="Question?">: ask before submitting.
  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });

  // A request htmx could not complete (a server error, the network) must not leave the
  // previous answer standing: a green "Fits." for a request that has since become invalid
  // would be a lie. Replace the target's content with a plain error.
  function failed(event, words) {
    var target = event.detail && event.detail.target;
    if (!target || !target.hasAttribute("data-fail-text")) return;
    var box = document.createElement("div");
    box.className = "preview no";
    box.setAttribute("data-preview", "error");
    box.setAttribute("role", "alert");
    var strong = document.createElement("strong");
    strong.textContent = target.getAttribute("data-fail-text") + " ";
    box.appendChild(strong);
    box.appendChild(document.createTextNode(words));
    target.replaceChildren(box);
  }
  document.body.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    failed(event, "The server answered " + (xhr ? xhr.status : "an error") + "; try again.");
  });
  document.body.addEventListener("htmx:sendError", function (event) {
    failed(event, "The portal could not be reached; try again.");
  });

  // A size control (<input type="radio" name="size" data-size-choice>): the fields of the
  // sizes not chosen (data-size="trays", "gpus") are disabled, so a value left in one is
  // visibly out of play rather than silently dropped by the server.
  function applySize(form) {
    var chosen = form.querySelector('input[name="size"][data-size-choice]:checked');
    if (!chosen) return;
    form.querySelectorAll("[data-size]").forEach(function (input) {
      input.disabled = input.dataset.size !== chosen.value;
    });
  }
  // Capture: before htmx (listening on the form) reads the fields for its preview.
  document.addEventListener("change", function (event) {
    if (event.target.matches('input[name="size"][data-size-choice]') && event.target.form) {
      applySize(event.target.form);
    }
  }, true);
  document.querySelectorAll("form").forEach(applySize);

  // A note on what was just done ("Requested train.", "Releasing train.") is true of the
  // phase the page opened in; once the live part shows the domain in another phase it
  // would be stale, so it goes (warnings and errors stay).
  var phase = document.getElementById("domain-phase");
  var openedIn = phase && phase.dataset.phase;
  document.body.addEventListener("htmx:afterSwap", function () {
    var now = document.getElementById("domain-phase");
    if (!openedIn || !now || now.dataset.phase === openedIn) return;
    document.querySelectorAll(".messages li.msg-success, .messages li.msg-info")
      .forEach(function (note) { note.remove(); });
    document.querySelectorAll(".messages:empty").forEach(function (list) { list.remove(); });
  });

  // Check-all boxes: <input type="checkbox" data-check-all="name"> ticks every box of
  // that name in its form (bulk tray actions).
  document.addEventListener("change", function (event) {
    var box = event.target.closest("[data-check-all]");
    if (!box || !box.form) return;
    box.form.querySelectorAll('input[type="checkbox"][name="' + box.dataset.checkAll + '"]')
      .forEach(function (other) { other.checked = box.checked; });
  });
})();
