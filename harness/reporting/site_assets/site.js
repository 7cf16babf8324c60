"use strict";
/* Sorting for tables with class "sortable". Cells sort by their data-sort attribute (numbers as numbers),
   else by their text; missing cells always go last. #sort=<column>:<asc|desc> sorts the board on load. */
(function () {
  function key(cell) {
    if (!cell) { return null; }
    var s = cell.getAttribute("data-sort");
    if (s === null) { s = cell.textContent.trim(); }
    if (s === "" || s === "\u2014" || s === "n/a") { return null; }
    var n = Number(s);
    if (!isNaN(n)) { return n; }
    if (/^[-+]?(\d|\.\d)/.test(s)) { var f = parseFloat(s); if (!isNaN(f)) { return f; } }
    return s.toLowerCase();
  }
  function compare(x, y) {
    if (typeof x !== typeof y) { return typeof x === "number" ? -1 : 1; }
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  function sortBy(table, col, descending) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      if (x === null || y === null) { return (x === null) - (y === null); }
      return descending ? -compare(x, y) : compare(x, y);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    heads[col].setAttribute("aria-sort", descending ? "descending" : "ascending");
    table.setAttribute("data-sorted", heads[col].getAttribute("data-key") + ":" + (descending ? "desc" : "asc"));
  }
  function setup(table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      var title = th.getAttribute("title");
      th.setAttribute("title", title ? title + " (click to sort)" : "click to sort");
      th.addEventListener("click", function () {
        var descending = th.getAttribute("aria-sort") === "ascending";
        sortBy(table, col, descending);
      });
    });
  }
  function fromHash() {
    var m = /^#sort=([^:]*):(asc|desc)$/.exec(location.hash);
    var table = document.getElementById("board");
    if (!m || !table) { return; }
    var wanted = decodeURIComponent(m[1]);
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) {
      if (heads[i].getAttribute("data-key") === wanted) { sortBy(table, i, m[2] === "desc"); return; }
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), setup);
    fromHash();
  });
  window.addEventListener("hashchange", fromHash);
})();
