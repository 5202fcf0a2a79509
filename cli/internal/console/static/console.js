// Onceflight console: local times, "/" to search, and live updates over
// Server-Sent Events (the page reloads its <main> when the index changed).
(function () {
  "use strict";
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) { return; }
      el.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
        pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
      el.title = el.getAttribute("datetime").replace("T", " ") + " UTC";
    });
  }
  localTimes(document);
  document.addEventListener("keydown", function (ev) {
    var t = ev.target;
    if (ev.key !== "/" || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName) || ev.ctrlKey || ev.metaKey) { return; }
    ev.preventDefault();
    var q = document.getElementById("q-key");
    if (q) { q.focus(); } else { window.location.href = "/search"; }
  });
  var body = document.body;
  if (!body.dataset.live || !window.EventSource) { return; }
  var state = document.getElementById("live-state");
  var shown = body.dataset.version;
  var busy = false;
  function refresh() {
    if (busy) { return; }
    var a = document.activeElement;
    if (a && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName)) { return; } // do not swap a form being typed in
    busy = true;
    fetch(window.location.href, { headers: { "Accept": "text/html", "X-Console-Refresh": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        busy = false;
        if (!html) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var main = doc.getElementById("main");
        if (!main) { return; }
        var open = {};
        document.querySelectorAll("#main details[open]").forEach(function (d, i) { open[i] = true; });
        document.getElementById("main").replaceChildren.apply(document.getElementById("main"), Array.from(main.childNodes));
        document.querySelectorAll("#main details").forEach(function (d, i) { if (open[i]) { d.open = true; } });
        shown = doc.body.dataset.version;
        localTimes(document.getElementById("main"));
      })
      .catch(function () { busy = false; });
  }
  var es = new EventSource("/live");
  es.addEventListener("version", function (ev) {
    if (state) { state.textContent = "live"; }
    if (ev.data !== shown) { refresh(); }
  });
  es.onerror = function () { if (state) { state.textContent = "reconnecting…"; } };
})();
