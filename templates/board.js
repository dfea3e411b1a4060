/* reporter board: sorting (the vendored tablesort) and the filters of the leaderboard page. No network. */
(function () {
  "use strict";
  function ready(fn) {
    if (document.readyState !== "loading") { fn(); } else { document.addEventListener("DOMContentLoaded", fn); }
  }
  ready(function () {
    var table = document.getElementById("leaderboard");
    if (!table) { return; }
    if (window.Tablesort) { new window.Tablesort(table); }
    var group = document.getElementById("group-filter");
    var refs = document.getElementById("show-references");
    function applyGroup() {
      var g = group ? group.value : "";
      var cells = table.querySelectorAll("[data-group]");
      for (var i = 0; i < cells.length; i++) {
        var show = !g || cells[i].getAttribute("data-group") === g;
        cells[i].style.display = show ? "" : "none";
      }
    }
    function applyRefs() {
      var body = document.getElementById("references");
      if (body && refs) { body.style.display = refs.checked ? "" : "none"; }
    }
    if (group) { group.addEventListener("change", applyGroup); }
    if (refs) { refs.addEventListener("change", applyRefs); }
    applyGroup();
    applyRefs();
    table.setAttribute("data-ready", "1");
  });
})();
