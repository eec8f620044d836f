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
// holding them. A tile's data-d lists the indexes of its domains in the page's one list
// (#hm-domains: [[namespace, [name, ...]], ...]); its data-h has a character per cell,
// "." for none, else the letter of its domain among data-d's (a, b, ...). No title per
// cell, no request.
(function () {
  "use strict";
  var table = null, source = null;
  function domains() {
    var list = document.getElementById("hm-domains");
    if (!list) return [];
    if (list !== source) {  // a live refresh brings a new list
      source = list;
      table = [];
      JSON.parse(list.textContent).forEach(function (group) {
        group[1].forEach(function (name) { table.push([group[0], name]); });
      });
    }
    return table;
  }
  function letter(c) {
    var code = c.charCodeAt(0);
    return code < 0x100 ? code - 97 : code - 0x100;
  }
  function domainOf(tile, at) {
    var c = (tile.dataset.h || "").charAt(at);
    if (!c || c === ".") return null;
    return domains()[Number(tile.dataset.d.split(" ")[letter(c)])];
  }
  function named(d) {
    return "domain " + d[1] + " (namespace " + d[0] + ")";
  }
  function cellWords(cell, tile) {
    var cells = cell.parentNode.children, at = Array.prototype.indexOf.call(cells, cell);
    var d = domainOf(tile, at);
    return tile.dataset.rack + ", tray " + (at + 1) + " of " + cells.length + ": " +
      (d ? "held by " + named(d) : "held by no domain");
  }
  function tileWords(tile) {
    var h = tile.dataset.h || "", ids = tile.dataset.d ? tile.dataset.d.split(" ") : [];
    var words = ids.map(function (id, n) {
      var count = h.split(String.fromCharCode(n < 26 ? 97 + n : 0x100 + n)).length - 1;
      return named(domains()[Number(id)]) + ", " + count + " tray" + (count > 1 ? "s" : "");
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
