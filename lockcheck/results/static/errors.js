// Any script error lands in the page itself (#lc-errors), where a reader and the
// browser tests see it; and the page says how many of its images decoded.
(function () {
  "use strict";
  function note(text) {
    var box = document.getElementById("lc-errors");
    if (box) { box.textContent += text + "\n"; }
    document.documentElement.setAttribute("data-js-errors", "1");
  }
  window.addEventListener("error", function (e) {
    note("script error: " + (e.message || e) + (e.lineno ? " (line " + e.lineno + ")" : ""));
  });
  window.addEventListener("unhandledrejection", function (e) { note("unhandled: " + e.reason); });
  // how many images decoded: a broken embedded plot shows up here
  window.addEventListener("load", function () {
    var imgs = document.querySelectorAll("img"), ok = 0;
    imgs.forEach(function (i) { if (i.complete && i.naturalWidth > 0) { ok++; } });
    document.documentElement.setAttribute("data-images", String(imgs.length));
    document.documentElement.setAttribute("data-images-loaded", String(ok));
    document.documentElement.setAttribute("data-load-ms", String(Math.round(performance.now())));
  });
})();
