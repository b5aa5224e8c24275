// herd dashboard: renders the model the server streams on /api/events.
// Every update carries the whole model; between updates the ages, the time
// held and the TTL left tick on the browser's clock.
'use strict';

(function () {
  var model = null;
  var receivedAt = 0; // Date.now() when the model arrived

  function $(id) { return document.getElementById(id); }

  // el builds an element; text is set with textContent, never as HTML.
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === 'text') { e.textContent = attrs[k]; }
        else if (k === 'className') { e.className = attrs[k]; }
        else if (k === 'style') { Object.assign(e.style, attrs[k]); }
        else { e.setAttribute(k, attrs[k]); }
      });
    }
    (children || []).forEach(function (c) { e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return e;
  }

  function clear(e) { while (e.firstChild) { e.removeChild(e.firstChild); } }

  // elapsed is the time since the model arrived, in ms.
  function elapsed() { return model ? Date.now() - receivedAt : 0; }
  function serverNow() { return model.serverTimeMs + elapsed(); }

  // age writes a duration in ms as herd's command does: 850ms, 4.2s, 2m03s, 1h02m, 3d04h.
  function age(ms) {
    if (ms < 0 || ms === undefined || ms === null) { return '-'; }
    var s = ms / 1000;
    if (ms < 1000) { return Math.floor(ms) + 'ms'; }
    if (s < 10) { return s.toFixed(1) + 's'; }
    if (s < 60) { return Math.floor(s) + 's'; }
    var m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (m < 60) { return m + 'm' + pad(Math.floor(s) % 60); }
    if (h < 24) { return h + 'h' + pad(m % 60); }
    return d + 'd' + pad(h % 24);
  }
  function pad(n) { return (n < 10 ? '0' : '') + n; }

  function clock(ms) {
    var d = new Date(ms);
    return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  }

  // hue gives each node id a stable colour.
  function hue(id) {
    var h = 2166136261;
    for (var i = 0; i < id.length; i++) { h = Math.imul(h ^ id.charCodeAt(i), 16777619) >>> 0; }
    return 'hsl(' + Math.round((h % 1000) * 137.508) % 360 + ', 55%, 42%)';
  }

  function render() {
    document.title = (model.master ? model.master.nodeId : 'no master') + ' · herd ' + model.lock;
    $('lock').textContent = model.lock;
    $('url').textContent = model.url;
    $('backend').textContent = model.backend;
    var err = $('error');
    err.hidden = !model.error;
    err.textContent = model.error ? 'Redis cannot be read: ' + model.error + ' (showing the last state read)' : '';
    renderWarnings();
    renderMaster();
    renderStats();
    renderProcesses();
    renderAssignments();
    renderTimeline();
    renderEvents();
    tick();
  }

  function renderWarnings() {
    var list = $('warning-list');
    clear(list);
    model.warnings.forEach(function (w) { list.appendChild(el('li', { text: w })); });
    $('warnings').hidden = model.warnings.length === 0;
  }

  function renderMaster() {
    var m = model.master;
    $('master-none').hidden = !!m;
    $('master-info').hidden = !m;
    if (m) {
      $('master-id').textContent = m.nodeId;
      $('master-ident').textContent = m.identifier && m.identifier !== m.nodeId ? m.identifier : '';
      $('master-term').textContent = m.term;
    }
    var sel = $('stepdown-to');
    var chosen = sel.value;
    clear(sel);
    sel.appendChild(el('option', { value: '', text: 'any candidate' }));
    model.processes.forEach(function (p) {
      if (p.role === 'slave') { sel.appendChild(el('option', { value: p.processId, text: p.processId })); }
    });
    sel.value = chosen;
    if (sel.value !== chosen) { sel.value = ''; }
    var btn = $('stepdown');
    btn.disabled = !model.allowStepDown || !m || busy;
    sel.disabled = !model.allowStepDown;
    if (!model.allowStepDown) {
      btn.title = 'start herd dashboard with -allow-step-down to enable';
      if (!noteSet) { $('stepdown-note').textContent = 'Step-down is off: start herd dashboard with -allow-step-down.'; }
    } else {
      btn.title = '';
    }
  }

  function renderStats() {
    var slaves = model.processes.filter(function (p) { return p.role === 'slave'; }).length;
    $('count-all').textContent = model.processes.length;
    $('count-slaves').textContent = slaves;
    $('count-failovers').textContent = model.failovers;
    var last = null;
    model.masterships.forEach(function (m) { if (m.gapMs !== undefined) { last = m; } });
    $('last-gap').textContent = last ? (last.gapAtMost ? '≤ ' : '') + last.gapMs + ' ms' : '–';
    var dead = $('count-dead');
    dead.textContent = model.deadLetters === null ? '?' : model.deadLetters;
    dead.title = model.deadLetters === null ? 'cannot be counted: ' + model.deadLettersError : 'herd dead list shows them';
    dead.classList.toggle('has-dead', model.deadLetters > 0);
  }

  function cell(label, children, className) {
    return el('td', { 'data-label': label, className: className || '' }, children);
  }

  function capabilities(c) {
    c = c || {};
    return (c.canProcessDetections ? 'detections' : 'no detections') + ' · subs ' + (c.maxSubscriptions || 0) + ' · load ' + (c.preferredWorkload || 0) + '%';
  }

  function metadata(m) {
    if (!m) { return '-'; }
    var keys = Object.keys(m).sort();
    if (keys.length === 0) { return '-'; }
    return keys.map(function (k) {
      var v = m[k];
      return k + '=' + (typeof v === 'string' ? v : JSON.stringify(v));
    }).join(' ');
  }

  function renderProcesses() {
    var body = $('process-rows');
    clear(body);
    $('no-processes').hidden = model.processes.length > 0;
    model.processes.forEach(function (p) {
      var hb = el('div', { className: 'hb' }, [
        el('div', { className: 'hb-track' }, [el('div', { className: 'hb-fill' })]),
        el('span', { className: 'hb-age mono' })
      ]);
      var row = el('tr', { 'data-process-id': p.processId, 'data-age-ms': p.ageMs, className: p.role === 'master' ? 'is-master' : '' }, [
        cell('process', [p.processId], 'mono'),
        cell('role', [el('span', { className: 'role role-' + p.role, text: p.role })].concat(
          p.priority ? [el('span', { className: 'prio mono', title: 'priority (Config.Priority): higher is preferred as master', text: 'priority ' + p.priority })] : [])),
        cell('identifier', [p.identifier || '-']),
        cell('capabilities', [capabilities(p.capabilities)]),
        cell('metadata', [metadata(p.metadata)], 'mono'),
        cell('heartbeat', [hb])
      ]);
      body.appendChild(row);
    });
  }

  // renderAssignments shows each watched item set of package assign: the
  // items by state, then each slave's planned and owned counts.
  function renderAssignments() {
    var sets = model.assignments || [];
    $('assignments').hidden = sets.length === 0;
    var box = $('assign-sets');
    clear(box);
    sets.forEach(function (a) {
      var c = a.counts || {};
      var line = a.error ? 'cannot be read: ' + a.error :
        ['owned', 'moving', 'waiting', 'unassigned', 'removed'].map(function (k) { return (c[k] || 0) + ' ' + k; }).join(' · ');
      var rows = a.slaves.map(function (s) {
        return el('tr', { 'data-slave': s.id }, [cell('slave', [s.id], 'mono'), cell('planned', [String(s.planned)]), cell('owned', [String(s.owned)])]);
      });
      box.appendChild(el('div', { className: 'assign-set', 'data-set': a.set }, [
        el('h3', { className: 'sub mono', text: a.set }),
        el('p', { className: 'assign-counts' + ((c.moving || c.waiting || c.unassigned) ? ' has-moves' : ''), text: line }),
        el('table', { className: 'processes' }, [
          el('thead', null, [el('tr', null, [el('th', { text: 'slave' }), el('th', { text: 'planned' }), el('th', { text: 'owned' })])]),
          el('tbody', null, rows)
        ])
      ]));
    });
  }

  // renderTimeline draws the masterships of the window as bars, a red mark
  // at each failover, and lists the failovers with their gaps.
  function renderTimeline() {
    var tl = $('timeline');
    clear(tl);
    var now = serverNow();
    var first = now;
    model.masterships.forEach(function (m) { if (m.startMs > 0 && m.startMs < first) { first = m.startMs; } });
    var span = Math.min(Math.max((now - first) * 1.1, 10000), 30 * 60000);
    var start = now - span;
    $('axis-start').textContent = clock(start);
    model.masterships.forEach(function (m, i) {
      var s = m.startMs > 0 ? m.startMs : start;
      var e = m.endMs > 0 ? m.endMs : now;
      if (e < start) { return; }
      s = Math.max(s, start);
      var left = (s - start) / span * 100, width = Math.max((e - s) / span * 100, 0.4);
      var current = !m.endMs && model.master && model.master.nodeId === m.nodeId && model.master.term === m.term;
      tl.appendChild(el('div', {
        className: 'bar' + (current ? ' current' : ''),
        title: m.nodeId + ' · term ' + m.term + (m.end ? ' · ' + m.end : ''),
        style: { left: left + '%', width: width + '%', background: hue(m.nodeId) },
        text: width > 6 ? m.nodeId : ''
      }));
      if (m.gapMs !== undefined && m.endMs > 0 && m.endMs >= start) {
        tl.appendChild(el('div', { className: 'gapmark', title: 'failover gap ' + m.gapMs + ' ms', style: { left: ((m.endMs - start) / span * 100) + '%' } }));
      }
    });
    var list = $('failovers');
    clear(list);
    var shown = 0;
    for (var i = model.masterships.length - 1; i >= 0 && shown < 8; i--) {
      var m = model.masterships[i];
      if (m.gapMs === undefined) { continue; }
      shown++;
      list.appendChild(el('li', {}, [
        el('span', { className: 'time', text: clock(m.endMs || m.startMs) }),
        el('span', { text: m.nodeId + ' → ' + m.successor }),
        el('span', { className: 'gap', text: (m.gapAtMost ? '≤ ' : '') + m.gapMs + ' ms without a master' }),
        el('span', { className: 'time', text: m.end || '' })
      ]));
    }
    if (shown === 0) { list.appendChild(el('li', { className: 'note', text: 'no failover seen since the dashboard started' })); }
  }

  function renderEvents() {
    var list = $('events');
    clear(list);
    for (var i = model.events.length - 1; i >= 0; i--) {
      var e = model.events[i];
      list.appendChild(el('li', { 'data-event': e.event }, [
        el('span', { className: 'time', text: e.time.substring(11, 23) }),
        el('span', { className: 'kind kind-' + e.event, text: e.event }),
        el('span', { text: e.text })
      ]));
    }
  }

  // tick updates what moves with time alone.
  function tick() {
    if (!model) { return; }
    var dt = elapsed();
    var m = model.master;
    if (m) {
      $('master-held').textContent = m.heldMs >= 0 ? age(m.heldMs + dt) : '-';
      $('master-ttl').textContent = m.ttlMs >= 0 ? age(Math.max(m.ttlMs - dt, 0)) : 'none';
    }
    var ttl = model.processTtlMs;
    var rows = $('process-rows').rows;
    for (var i = 0; i < rows.length; i++) {
      var a = Number(rows[i].getAttribute('data-age-ms')) + dt;
      var f = ttl > 0 ? a / ttl : 0;
      var hb = rows[i].querySelector('.hb');
      hb.className = 'hb ' + (f >= 0.8 ? 'hb-late' : f >= 0.5 ? 'hb-warn' : 'hb-ok');
      hb.querySelector('.hb-fill').style.width = Math.min(Math.max(f, 0.02), 1) * 100 + '%';
      hb.querySelector('.hb-age').textContent = age(a);
      hb.title = 'last heartbeat ' + age(a) + ' ago; the entry expires after ' + age(ttl);
    }
  }

  function setConn(state, text) {
    var c = $('conn');
    c.setAttribute('data-state', state);
    $('conn-text').textContent = text;
  }

  var busy = false, noteSet = false;
  function stepDown(ev) {
    ev.preventDefault();
    if (!model || !model.master || !model.allowStepDown) { return; }
    var to = $('stepdown-to').value;
    var m = model.master;
    var question = 'Ask ' + m.nodeId + ' (term ' + m.term + ') to step down' + (to ? ' and hand over to ' + to + '?' : '? Any candidate may take over.');
    if (!window.confirm(question)) { return; }
    busy = true;
    noteSet = true;
    $('stepdown').disabled = true;
    $('stepdown-note').textContent = 'asking ' + m.nodeId + ' to hand over…';
    fetch('/api/step-down', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ to: to }) })
      .then(function (r) { return r.json(); })
      .then(function (a) {
        if (a.ok) {
          $('stepdown-note').textContent = a.result.to + ' is master (term ' + a.result.term + '), ' + a.result.tookMs + ' ms after the request.';
        } else {
          $('stepdown-note').textContent = 'Not done: ' + a.error;
        }
      })
      .catch(function (e) { $('stepdown-note').textContent = 'Request failed: ' + e; })
      .then(function () { busy = false; if (model) { renderMaster(); } });
  }

  function start() {
    $('stepdown-form').addEventListener('submit', stepDown);
    var es = new EventSource('/api/events');
    es.addEventListener('model', function (ev) {
      model = JSON.parse(ev.data);
      receivedAt = Date.now();
      setConn('live', 'live · every ' + age(model.intervalMs));
      render();
    });
    es.onerror = function () { setConn('down', 'reconnecting…'); };
    setInterval(tick, 250);
    setInterval(function () { if (model) { renderTimeline(); } }, 1000);
  }

  document.addEventListener('DOMContentLoaded', start);
}());
