// The report page's behaviour: item list, search and filter, span tooltips linked to the document heat, CSV export.
// Every text it inserts comes from the JSON data block and goes in through textContent, never as markup.
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('mirage-data').textContent);
  const colors = data.colors;
  const entries = Array.from(document.querySelectorAll('nav .entry'));
  const panels = Array.from(document.querySelectorAll('section.item'));
  const panelOf = k => document.getElementById('item-' + k);

  function show(k) {
    panels.forEach(p => { p.hidden = p.dataset.item !== String(k); });
    entries.forEach(e => e.classList.toggle('active', e.dataset.item === String(k)));
  }
  entries.forEach(e => e.addEventListener('click', ev => {
    ev.preventDefault(); show(e.dataset.item); history.replaceState(null, '', '#item-' + e.dataset.item);
  }));

  // Search and filter: items whose text holds every word and, unless "all", that have a sentence whose citation
  // sets differ (mirage against self-citation, or run A against run B); the tables then show only such rows.
  const search = document.getElementById('search');
  const filter = document.getElementById('filter');
  const count = document.getElementById('count');
  const key = {self: 'selfDiffer', runs: 'runsDiffer'};
  function apply() {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    const mode = filter.value;
    let n = 0;
    entries.forEach(e => {
      const ok = words.every(w => e.dataset.search.includes(w)) && (mode === 'all' || Number(e.dataset[key[mode]]) > 0);
      e.parentElement.hidden = !ok; n += ok;
    });
    count.textContent = n + ' of ' + entries.length + ' item(s)';
    document.querySelectorAll('table.sentences tbody tr').forEach(tr => {
      tr.hidden = mode !== 'all' && tr.dataset[key[mode]] !== '1';
    });
  }
  search.addEventListener('input', apply);
  filter.addEventListener('change', apply);
  apply();

  // CSV of the rows shown: cells give their data-csv value when they have one, else their text.
  function cell(c) { return c.dataset.csv !== undefined ? c.dataset.csv : c.textContent.replace(/\s+/g, ' ').trim(); }
  function csvLine(values) {
    return values.map(v => {
      v = String(v);
      if (/^[=+\-@\t\r]/.test(v)) v = "'" + v;  // a spreadsheet would run it as a formula
      return '"' + v.replace(/"/g, '""') + '"';
    }).join(',');
  }
  function header(table) { return Array.from(table.tHead.rows[0].cells).map(cell); }
  function shownRows(table, prefix) {
    return Array.from(table.tBodies[0].rows).filter(tr => !tr.hidden)
      .map(tr => csvLine(prefix.concat(Array.from(tr.cells).map(cell))));
  }
  function download(name, lines) {
    const blob = new Blob(['\ufeff' + lines.join('\r\n') + '\r\n'], {type: 'text/csv;charset=utf-8'});
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob); a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }
  document.querySelectorAll('section.item button.csv').forEach(b => b.addEventListener('click', () => {
    const table = panelOf(b.dataset.item).querySelector('table.sentences');
    download('mirage-item-' + b.dataset.item + '.csv', [csvLine(header(table))].concat(shownRows(table, [])));
  }));
  document.getElementById('csv-all').addEventListener('click', () => {
    const listed = entries.filter(e => !e.parentElement.hidden).map(e => panelOf(e.dataset.item));
    if (!listed.length) return;
    const first = listed[0].querySelector('table.sentences');
    let lines = [csvLine(['item', 'question'].concat(header(first)))];
    listed.forEach(p => {
      lines = lines.concat(shownRows(p.querySelector('table.sentences'), [p.dataset.item, p.dataset.question]));
    });
    download('mirage-items.csv', lines);
  });

  // Hovering an answer span: its top context tokens (shares of the answer token's saliency) in a tooltip, and the
  // document tokens it drew on outlined in the heat.
  const tip = document.getElementById('tip');
  panels.forEach(p => {
    const item = data.items[Number(p.dataset.item) - 1];
    item.runs.forEach((run, r) => {
      if (!run) return;
      const heat = Array.from(p.querySelectorAll('ol.docs[data-run="' + r + '"] mark.heat'));
      p.querySelectorAll('.answer[data-run="' + r + '"] mark.mirage-span').forEach((m, i) => {
        m.dataset.title = m.title; m.removeAttribute('title');
        const s = run.spans[i]; if (!s) return;
        const mine = new Set(s.tokens.map(String));
        const linked = heat.filter(h => h.dataset.tokens.split(' ').some(t => mine.has(t)));
        m.addEventListener('mouseenter', () => {
          tip.replaceChildren();
          const head = document.createElement('div'); head.className = 't';
          head.textContent = '\u201c' + s.text + '\u201d \u2192 documents ' + s.docs.map(d => '[' + d + ']').join('');
          tip.appendChild(head);
          const table = document.createElement('table');
          s.cues.forEach(c => {
            const tr = table.insertRow(); if (c.scaffold) tr.className = 'scaffold';
            const d = tr.insertCell(); const b = document.createElement('span'); b.className = 'd';
            b.style.background = colors[(c.doc - 1) % colors.length]; b.textContent = '[' + c.doc + ']'; d.appendChild(b);
            tr.insertCell().textContent = c.token + (c.scaffold ? ' (scaffolding)' : '');
            tr.insertCell().textContent = (100 * c.share).toFixed(1) + '%';
          });
          tip.appendChild(table);
          const note = document.createElement('div'); note.className = 'n';
          note.textContent = 'share of the answer token\u2019s saliency';
          tip.appendChild(note);
          const rect = m.getBoundingClientRect();
          tip.style.left = Math.max(0, Math.min(rect.left, window.innerWidth - 370)) + 'px';
          tip.style.top = (rect.bottom + 6) + 'px'; tip.hidden = false;
          linked.forEach(h => h.classList.add('linked'));
        });
        m.addEventListener('mouseleave', () => { tip.hidden = true; linked.forEach(h => h.classList.remove('linked')); });
      });
    });
  });

  const start = /^#item-(\d+)$/.exec(location.hash);
  show(start && panels[Number(start[1]) - 1] ? start[1] : (panels.length ? 1 : 0));
})();
