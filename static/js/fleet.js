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
