// Fleet: the toolbar's choices apply at once (the Show button stays for typed filters and
// for browsers without scripts).
(function () {
  "use strict";
  var form = document.getElementById("fleet-filters");
  if (!form) return;
  form.querySelectorAll("select").forEach(function (select) {
    select.addEventListener("change", function () { form.requestSubmit(); });
  });
})();

// The heat-map: pointing at a tray's cell, or focusing a rack's tile, names the domains
// holding them. Each tile's data-h lists, cell by cell, an index into the page's one list
// of domains (#hm-domains, "namespace/name"); no title per cell, no request.
(function () {
  "use strict";
  function domains() {
    var list = document.getElementById("hm-domains");
    return list ? JSON.parse(list.textContent) : [];
  }
  function held(tile) {
    return (tile.dataset.h || "").split(",");
  }
  function named(label) {
    var cut = label.indexOf("/");
    return "domain " + label.slice(cut + 1) + " (namespace " + label.slice(0, cut) + ")";
  }
  function cellWords(cell, tile) {
    var cells = Array.prototype.indexOf.call(cell.parentNode.children, cell);
    var index = held(tile)[cells];
    var where = tile.dataset.rack + ", tray " + (cells + 1) + " of " + cell.parentNode.children.length;
    return where + ": " + (index ? "held by " + named(domains()[Number(index)]) : "held by no domain");
  }
  function tileWords(tile) {
    var list = domains(), counts = {};
    held(tile).forEach(function (i) { if (i) counts[i] = (counts[i] || 0) + 1; });
    var words = Object.keys(counts).map(function (i) {
      return named(list[Number(i)]) + ", " + counts[i] + " tray" + (counts[i] > 1 ? "s" : "");
    });
    return tile.dataset.rack + ": " + (words.length ? words.join("; ") : "no domain");
  }
  function say(words) {
    var info = document.getElementById("hm-info");
    if (info && info.textContent !== words) info.textContent = words;
  }
  document.addEventListener("mouseover", function (event) {
    var cell = event.target.closest && event.target.closest(".hm-c i");
    if (!cell) return;
    var words = cellWords(cell, cell.closest(".hm"));
    if (!cell.title) cell.title = words;
    say(words);
  });
  document.addEventListener("focusin", function (event) {
    var tile = event.target.closest && event.target.closest("a.hm");
    if (tile) say(tileWords(tile));
  });
})();
