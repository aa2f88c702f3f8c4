// outboxkit console: live refresh. Each element with data-fragment="URL" is replaced, every
// data-refresh seconds, by the HTML the server renders at URL (the same template as the page).
// The pages work without it: reading needs no script.
(function () {
  "use strict";
  function refresh(el) {
    var url = el.getAttribute("data-fragment");
    var every = Math.max(2, parseInt(el.getAttribute("data-refresh"), 10) || 5) * 1000;
    function tick() {
      if (document.hidden) { setTimeout(tick, every); return; }
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (res) {
          if (!res.ok) { throw new Error("status " + res.status); }
          return res.text();
        })
        .then(function (html) {
          el.innerHTML = html;
          el.removeAttribute("data-stale");
          el.setAttribute("data-refreshed", new Date().toISOString());
        })
        .catch(function () { el.setAttribute("data-stale", "1"); })
        .then(function () { setTimeout(tick, every); });
    }
    setTimeout(tick, every);
  }
  document.addEventListener("DOMContentLoaded", function () {
    var els = document.querySelectorAll("[data-fragment]");
    for (var i = 0; i < els.length; i++) { refresh(els[i]); }
  });
})();
