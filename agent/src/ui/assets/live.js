// Live updates for shoal's read-only UI: follows /live (server-sent events) and reloads the
// page's <main> part (?part=main) when what it shows moved; new events go to the side panel.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var status = document.getElementById("live-status");
  var list = document.getElementById("live-events");
  if (!main || !window.EventSource) { return; }
  var watch = main.getAttribute("data-watch") || "";
  var url = "/live" + (watch ? "?watch=" + encodeURIComponent(watch) : "");
  var timer = null;
  function refresh() {
    if (timer) { return; }
    timer = setTimeout(function () {
      timer = null;
      var part = new URL(window.location.href);
      part.searchParams.set("part", "main");
      fetch(part.toString(), { cache: "no-store" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html !== null) { main.innerHTML = html; main.setAttribute("data-refreshed", String(Date.now())); }
        })
        .catch(function () { /* the next change tries again */ });
    }, 150);
  }
  function addEvent(e) {
    var ev;
    try { ev = JSON.parse(e.data); } catch (err) { return; }
    if (list) {
      var li = document.createElement("li");
      var when = new Date(ev.at_ms).toLocaleTimeString();
      li.textContent = when + " " + ev.node + " " + ev.kind + (ev.replica ? " " + ev.replica : "") + ": " + ev.reason;
      list.insertBefore(li, list.firstChild);
      while (list.children.length > 50) { list.removeChild(list.lastChild); }
    }
    if (!watch || (ev.replica && ev.replica.indexOf(watch + "/") === 0)) { refresh(); }
  }
  var source = new EventSource(url);
  source.addEventListener("nodes", refresh);
  source.addEventListener("workload", refresh);
  source.addEventListener("event", addEvent);
  source.onopen = function () { if (status) { status.textContent = "live"; } };
  source.onerror = function () { if (status) { status.textContent = "reconnecting"; } };
  // Close the stream when the page goes: a browser holds few connections per host (six for
  // HTTP/1.1), and a stream left open would take one from the next page's updates.
  window.addEventListener("pagehide", function () { source.close(); });
})();
