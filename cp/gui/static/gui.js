// kuma-cp GUI: keeps an open page current. GET /events (Server-Sent Events) says when the
// store or the agents connected changed; the page's content is then read again and
// replaced in place (the filter forms, focus and open details kept). No library.
(function () {
  'use strict';
  var live = document.getElementById('live');
  var timer = null, busy = false, again = false;

  function say(text) { if (live) { live.textContent = text; } }

  function openDetails(root) {
    var open = [];
    root.querySelectorAll('details[open]').forEach(function (d, i) {
      open.push(d.id || d.querySelector('summary') && d.querySelector('summary').textContent || String(i));
    });
    return open;
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { cache: 'no-store', headers: { 'Accept': 'text/html' } })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, 'text/html');
        var fresh = doc.getElementById('content');
        var cur = document.getElementById('content');
        if (!fresh || !cur) { return; }
        var open = openDetails(cur);
        var focused = document.activeElement && cur.contains(document.activeElement) ? document.activeElement : null;
        var focusKey = focused && (focused.id || (focused.textContent || '').trim());
        var node = document.importNode(fresh, true);
        node.querySelectorAll('details').forEach(function (d, i) {
          var key = d.id || d.querySelector('summary') && d.querySelector('summary').textContent || String(i);
          if (open.indexOf(key) >= 0) { d.open = true; }
        });
        cur.replaceWith(node);
        wireJSON(node);
        if (focusKey) {
          var target = node.querySelector('#' + CSS.escape(focusKey)) || Array.prototype.find.call(
            node.querySelectorAll('a, summary, [tabindex]'), function (el) { return (el.textContent || '').trim() === focusKey; });
          if (target) { target.focus(); }
        }
        document.body.setAttribute('data-refreshed', String(Date.now()));
        say('Updated at ' + new Date().toLocaleTimeString());
      })
      .catch(function (e) { say('Could not refresh the page: ' + e.message); })
      .finally(function () {
        busy = false;
        if (again) { again = false; schedule(); }
      });
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 100);
  }

  // The Envoy resources' JSON, read when its box is first opened.
  function wireJSON(root) {
    root.querySelectorAll('details[data-src]').forEach(function (d) {
      d.addEventListener('toggle', function () {
        if (!d.open || d.getAttribute('data-loaded')) { return; }
        d.setAttribute('data-loaded', '1');
        var pre = d.querySelector('pre');
        fetch(d.getAttribute('data-src'), { cache: 'no-store' })
          .then(function (r) { return r.text().then(function (t) { return { ok: r.ok, text: t }; }); })
          .then(function (r) { pre.textContent = r.ok ? r.text : 'Could not read it: ' + r.text; })
          .catch(function (e) { pre.textContent = 'Could not read it: ' + e.message; });
      });
    });
  }

  wireJSON(document);
  if (window.EventSource && document.getElementById('content')) {
    var es = new EventSource('/events');
    es.addEventListener('change', schedule);
    es.addEventListener('open', function () { document.body.setAttribute('data-live', 'yes'); });
    window.addEventListener('pagehide', function () { es.close(); });
  }
}());
