// The bias-run page's behaviour: the study tables or one query at a time, search, and the "moved" filters.
// It inserts no text of the run; it only shows and hides what the page already holds.
(function () {
  'use strict';
  const entries = Array.from(document.querySelectorAll('nav .entry'));
  const queries = entries.filter(e => e.dataset.item !== 'tables');
  const panels = Array.from(document.querySelectorAll('main section.item'));

  function show(k) {
    panels.forEach(p => { p.hidden = p.dataset.item !== String(k); });
    entries.forEach(e => e.classList.toggle('active', e.dataset.item === String(k)));
  }
  entries.forEach(e => e.addEventListener('click', ev => {
    ev.preventDefault(); show(e.dataset.item);
    history.replaceState(null, '', e.dataset.item === 'tables' ? '#tables' : '#item-' + e.dataset.item);
  }));

  // Queries whose text holds every word and, unless "all", whose self-citations or mirage citations moved.
  const search = document.getElementById('search');
  const filter = document.getElementById('filter');
  const count = document.getElementById('count');
  const key = {self: 'selfMoved', mirage: 'mirageMoved'};
  function apply() {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    const mode = filter.value;
    let n = 0;
    queries.forEach(e => {
      const ok = words.every(w => e.dataset.search.includes(w)) && (mode === 'all' || e.dataset[key[mode]] === '1');
      e.parentElement.hidden = !ok; n += ok;
    });
    count.textContent = n + ' of ' + queries.length + ' queries';
  }
  search.addEventListener('input', apply);
  filter.addEventListener('change', apply);
  apply();

  const start = /^#item-(\d+)$/.exec(location.hash);
  show(start && document.getElementById('item-' + start[1]) ? start[1] : 'tables');
})();
