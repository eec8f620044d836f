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
    // How many racks or cliques to span: a placed domain's only (nothing is placed when
    // the size follows the workload).
    form.querySelectorAll("[data-placed]").forEach(function (input) {
      input.disabled = chosen.value === "workload";
    });
  }
  // Capture: before htmx (listening on the form) reads the fields for its preview.
  document.addEventListener("change", function (event) {
    if (event.target.matches('input[name="size"][data-size-choice]') && event.target.form) {
      applySize(event.target.form);
    }
  }, true);
  document.querySelectorAll("form").forEach(applySize);
  // 0 trays means "follow the workload": say so with the radio, not silently on the server.
  document.addEventListener("input", function (event) {
    var field = event.target;
    if (!field.matches || !field.matches('[data-size="trays"]') || field.value.trim() !== "0") {
      return;
    }
    var follow = field.form && field.form.querySelector(
      'input[name="size"][data-size-choice][value="workload"]');
    if (!follow) return;
    field.value = "";
    follow.checked = true;
    applySize(field.form);
    follow.dispatchEvent(new Event("change", { bubbles: true }));
    follow.focus();
  }, true);

  // What a person asked for with a form (a preview, the manifests for another number of
  // pods) is marked busy until its answer is in: dimmed on the page, announced as busy to
  // a screen reader. Refreshes the live feed triggers are not anyone's wait: left alone.
  function busy(event, on) {
    var elt = event.detail && event.detail.elt;
    var target = event.detail && event.detail.target;
    if (!target || !elt || !elt.closest || !elt.closest("form")) return;
    var config = event.detail.requestConfig;
    var cause = config && config.triggeringEvent && config.triggeringEvent.type;
    if (on && cause === "live") return;
    if (on) target.setAttribute("aria-busy", "true");
    else target.removeAttribute("aria-busy");
  }
  document.body.addEventListener("htmx:beforeRequest", function (e) { busy(e, true); });
  ["htmx:afterRequest", "htmx:sendAbort"].forEach(function (name) {
    document.body.addEventListener(name, function (e) { busy(e, false); });
  });

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

  // A table or a log wider than the screen scrolls inside its box; a keyboard can scroll
  // it only if the box takes focus. Only boxes that do overflow become a tab stop (named
  // after their caption or section heading), so a desktop's tab order stays as it was.
  function name(box) {
    var caption = box.querySelector("caption");
    var section = box.closest("section, details");
    var heading = section && section.querySelector("h2, h3, summary");
    var words = (caption || heading || {}).textContent || "";
    return words.trim().replace(/\s+/g, " ") || "Scrolling content";
  }
  function scrollables() {
    document.querySelectorAll(".table-wrap, pre").forEach(function (box) {
      if (box.dataset.focusOwn === undefined) box.dataset.focusOwn = box.hasAttribute("tabindex");
      if (box.dataset.focusOwn === "true") return;  // the template made it focusable itself
      var over = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
      if (over && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "group");  // not a landmark: its section is already one
        box.setAttribute("aria-label", name(box));
      } else if (!over && box.hasAttribute("tabindex")) {
        ["tabindex", "role", "aria-label"].forEach(function (a) { box.removeAttribute(a); });
      }
    });
  }
  var resizing;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(scrollables, 150);
  });
  document.body.addEventListener("htmx:afterSettle", scrollables);
  document.addEventListener("toggle", scrollables, true);  // a <details> opened or closed
  scrollables();

  // Check-all boxes: <input type="checkbox" data-check-all="name"> ticks every box of
  // that name in its form (bulk tray actions).
  document.addEventListener("change", function (event) {
    var box = event.target.closest("[data-check-all]");
    if (!box || !box.form) return;
    box.form.querySelectorAll('input[type="checkbox"][name="' + box.dataset.checkAll + '"]')
      .forEach(function (other) { other.checked = box.checked; });
  });

  // The top bar's menus close on a click elsewhere and on Escape.
  function closeMenus(except) {
    document.querySelectorAll(".topbar details.menu[open]").forEach(function (menu) {
      if (menu !== except) menu.open = false;
    });
  }
  document.addEventListener("click", function (event) {
    closeMenus(event.target.closest && event.target.closest(".topbar details.menu"));
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var open = document.querySelector(".topbar details.menu[open]");
    if (open) {
      open.open = false;
      open.querySelector("summary").focus();
    }
  });
})();
