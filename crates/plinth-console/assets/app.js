// The Plinth console: a single page over the Kubernetes API of the server it came from.
// Everything is read and written with the user's credentials — a bearer token kept in this
// tab's session storage, or the browser's client certificate — so RBAC decides what shows.
//
// Routes (the URL's fragment):
//   #/                                   the kinds (sidebar) and a welcome
//   #/r/<group>/<version>/<plural>       a resource's objects in the namespace, kept live
//   #/o/<group>/<version>/<plural>/<name>[/<tab>]   one object: yaml, graph, events,
//                                        history, timeline, logs, exec
//   #/whocan                             who may do what (RBAC)

import { toYaml } from './yaml.js';

const HISTORY = '/apis/history.plinth.dev/v1alpha1';
const TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json';
const PAGE = 500;

const state = {
  token: sessionStorage.getItem('plinth-token') || '',
  certificate: sessionStorage.getItem('plinth-certificate') === 'yes',
  user: null,
  namespace: sessionStorage.getItem('plinth-namespace') || 'default',
  resources: [],
  // What the current view started (watches, log streams, sockets), stopped on leaving it.
  stops: [],
};

const $ = (selector, root = document) => root.querySelector(selector);

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class ApiError extends Error {
  constructor(code, message, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** A request to the API with the user's credentials; throws the `Status` of a failure. */
async function api(path, options = {}) {
  const headers = new Headers(options.headers || {});
  if (state.token) headers.set('Authorization', 'Bearer ' + state.token);
  if (!headers.has('Accept')) headers.set('Accept', 'application/json');
  const response = await fetch(path, { ...options, headers, credentials: 'same-origin' });
  if (!response.ok) {
    let status = null;
    try { status = await response.json(); } catch (_) { /* not a Status */ }
    if (response.status === 401) showLogin('Your credentials were refused (401).');
    throw new ApiError(response.status, (status && status.message) || response.statusText, status);
  }
  return response;
}

const json = async (path, options) => (await api(path, options)).json();

function stopAll() {
  for (const stop of state.stops.splice(0)) {
    try { stop(); } catch (_) { /* already stopped */ }
  }
}

/** Reads a streamed response line by line (watches, followed logs) until stopped. */
async function streamLines(path, onLine, accept = 'application/json') {
  const controller = new AbortController();
  state.stops.push(() => controller.abort());
  const response = await api(path, { signal: controller.signal, headers: { Accept: accept } });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        onLine(buffer.slice(0, newline));
        buffer = buffer.slice(newline + 1);
      }
    }
    if (buffer) onLine(buffer);
  } catch (error) {
    if (error.name !== 'AbortError') throw error;
  }
}

// ---------------------------------------------------------------- sign in

function showLogin(message = '') {
  stopAll();
  $('#login-view').hidden = false;
  $('#view').hidden = true;
  $('#login-error').textContent = message;
}

async function whoami() {
  const review = await json('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }),
  });
  return review.status.userInfo;
}

async function signIn(token, certificate) {
  state.token = token;
  state.certificate = certificate;
  try {
    state.user = await whoami();
  } catch (error) {
    state.token = '';
    $('#login-error').textContent = 'Sign-in failed: ' + error.message;
    return false;
  }
  sessionStorage.setItem('plinth-token', token);
  sessionStorage.setItem('plinth-certificate', certificate ? 'yes' : 'no');
  $('#login-view').hidden = true;
  $('#view').hidden = false;
  await loadKinds();
  await loadNamespaces();
  $('#whoami').textContent = 'signed in as ' + state.user.username;
  $('#logout').hidden = false;
  route();
  return true;
}

// ---------------------------------------------------------------- discovery

function resourcePath(r, name) {
  const base = r.group ? `/apis/${r.group}/${r.version}` : `/api/${r.version}`;
  const ns = r.namespaced ? `/namespaces/${encodeURIComponent(state.namespace)}` : '';
  return `${base}${ns}/${r.plural}${name ? '/' + encodeURIComponent(name) : ''}`;
}

function findResource(group, version, plural) {
  return state.resources.find((r) => r.group === group && r.version === version && r.plural === plural);
}

async function loadKinds() {
  const lists = [];
  const core = await json('/api/v1');
  lists.push(['', 'v1', core]);
  const groups = await json('/apis');
  await Promise.all(groups.groups.map(async (g) => {
    const version = (g.preferredVersion || g.versions[0]).version;
    try {
      lists.push([g.name, version, await json(`/apis/${g.name}/${version}`)]);
    } catch (_) { /* a group the user may not discover */ }
  }));
  state.resources = [];
  for (const [group, version, list] of lists) {
    for (const r of list.resources) {
      if (r.name.includes('/') || !(r.verbs || []).includes('list')) continue;
      state.resources.push({ group, version, plural: r.name, kind: r.kind, namespaced: r.namespaced });
    }
  }
  state.resources.sort((a, b) => (a.group || '').localeCompare(b.group || '') || a.kind.localeCompare(b.kind));
  const nav = $('#kinds');
  nav.replaceChildren();
  let current = null;
  for (const r of state.resources) {
    if (r.group !== current) {
      current = r.group;
      nav.append(el('h3', {}, r.group || 'core'));
    }
    nav.append(el('a', {
      href: `#/r/${r.group || '_'}/${r.version}/${r.plural}`,
      'data-kind': r.kind,
      'data-plural': r.plural,
    }, r.kind));
  }
}

async function loadNamespaces() {
  const select = $('#namespace');
  let names = [state.namespace];
  try {
    const list = await json('/api/v1/namespaces');
    names = list.items.map((n) => n.metadata.name);
  } catch (_) { /* may not list namespaces: keep the current one */ }
  if (!names.includes(state.namespace)) names.push(state.namespace);
  select.replaceChildren(...names.sort().map((n) => el('option', { value: n, selected: n === state.namespace }, n)));
}

// ---------------------------------------------------------------- routing

function route() {
  stopAll();
  if (!state.user) return;
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const view = $('#view');
  view.replaceChildren();
  for (const a of document.querySelectorAll('nav#kinds a')) a.classList.remove('current');
  const group = (g) => (g === '_' ? '' : g);
  const failed = (error) => view.append(el('p', { class: 'error' }, error.message));
  if (parts[0] === 'r' && parts.length >= 4) {
    const r = findResource(group(parts[1]), parts[2], parts[3]);
    if (!r) return failed(new Error('no such resource'));
    const link = document.querySelector(`nav#kinds a[href="#/r/${parts[1]}/${parts[2]}/${parts[3]}"]`);
    if (link) link.classList.add('current');
    showList(view, r).catch(failed);
  } else if (parts[0] === 'o' && parts.length >= 5) {
    const r = findResource(group(parts[1]), parts[2], parts[3]);
    if (!r) return failed(new Error('no such resource'));
    showObject(view, r, parts[4], parts[5] || 'yaml').catch(failed);
  } else if (parts[0] === 'whocan') {
    showWhoCan(view);
  } else {
    view.append(el('h1', {}, 'Plinth'),
      el('p', {}, 'Pick a kind on the left. Namespace: ', el('b', {}, state.namespace), '.'));
  }
}

// ---------------------------------------------------------------- lists

function age(timestamp) {
  if (!timestamp) return '';
  const seconds = Math.max(0, (Date.now() - Date.parse(timestamp)) / 1000);
  if (seconds < 120) return Math.round(seconds) + 's';
  if (seconds < 7200) return Math.round(seconds / 60) + 'm';
  if (seconds < 172800) return Math.round(seconds / 3600) + 'h';
  return Math.round(seconds / 86400) + 'd';
}

/** The objects of `r`: the first page at once, the rest as it comes, then a watch. */
async function showList(view, r) {
  const where = r.namespaced ? ` in ${state.namespace}` : '';
  const status = el('div', { id: 'status-line' }, 'loading…');
  const table = el('table', { id: 'objects' });
  view.append(el('h1', {}, r.kind, el('small', {}, where)), status, table);
  let columns = null;
  const rows = new Map();
  const open = (name) => { location.hash = `#/o/${r.group || '_'}/${r.version}/${r.plural}/${encodeURIComponent(name)}`; };
  const rowOf = (row) => {
    const name = row.object && row.object.metadata ? row.object.metadata.name : row.cells[0];
    const tr = el('tr', { class: 'clickable', 'data-name': name, onclick: () => open(name) },
      row.cells.map((cell) => el('td', {}, typeof cell === 'object' ? JSON.stringify(cell) : String(cell))));
    return [name, tr];
  };
  let continueToken = '';
  let revision = '';
  let total = 0;
  do {
    const page = await json(`${resourcePath(r)}?limit=${PAGE}${continueToken ? '&continue=' + encodeURIComponent(continueToken) : ''}`,
      { headers: { Accept: TABLE } });
    if (!columns) {
      columns = page.columnDefinitions.filter((c) => !c.priority);
      table.append(el('thead', {}, el('tr', {}, columns.map((c) => el('th', {}, c.name)))));
      table.append(el('tbody'));
    }
    const keep = page.columnDefinitions.map((c) => !c.priority);
    const body = $('tbody', table);
    for (const row of page.rows || []) {
      const [name, tr] = rowOf({ ...row, cells: row.cells.filter((_, i) => keep[i]) });
      rows.set(name, tr);
      body.append(tr);
    }
    total += (page.rows || []).length;
    // When the first rows showed, for the first-paint benchmark (scripts/console-first-paint).
    if (window.plinthFirstRows === undefined) window.plinthFirstRows = performance.now();
    revision = revision || page.metadata.resourceVersion;
    continueToken = page.metadata.continue || '';
    const more = page.metadata.remainingItemCount;
    status.textContent = `${total} ${r.plural}${continueToken ? ` (loading ${more ?? 'more'}…)` : ''}`;
  } while (continueToken && document.body.contains(table));
  if (!document.body.contains(table)) return;
  status.textContent = `${total} ${r.plural} · live`;
  // Changes from the list's revision on: each changed row is read again as a table row.
  const refresh = async (name) => {
    try {
      const one = await json(resourcePath(r, name), { headers: { Accept: TABLE } });
      const keep = one.columnDefinitions.map((c) => !c.priority);
      const [, tr] = rowOf({ ...one.rows[0], cells: one.rows[0].cells.filter((_, i) => keep[i]) });
      tr.classList.add('flash');
      setTimeout(() => tr.classList.remove('flash'), 1200);
      const old = rows.get(name);
      if (old) old.replaceWith(tr); else $('tbody', table).prepend(tr);
      rows.set(name, tr);
    } catch (_) { /* gone meanwhile: its DELETED event follows */ }
  };
  // A watch that breaks (the server restarted, the browser saw the network change) is
  // resumed from the last revision it delivered, as an informer resumes; one the server
  // ends with an error (410: that revision is gone) says so and stays ended.
  let ended = null;
  const onLine = (line) => {
    if (!line.trim()) return;
    const event = JSON.parse(line);
    const meta = (event.object && event.object.metadata) || {};
    if (event.type === 'ERROR') {
      ended = (event.object && event.object.message) || 'the server ended the watch';
      return;
    }
    if (meta.resourceVersion) revision = meta.resourceVersion;
    if (event.type === 'DELETED') {
      const tr = rows.get(meta.name);
      if (tr) tr.remove();
      rows.delete(meta.name);
    } else if (event.type === 'ADDED' || event.type === 'MODIFIED') {
      refresh(meta.name);
    }
    status.textContent = `${rows.size} ${r.plural} · live`;
  };
  for (let attempt = 0; document.body.contains(table) && !ended; attempt++) {
    const watchPath = `${resourcePath(r)}?watch=1&allowWatchBookmarks=true&resourceVersion=${revision}`;
    try {
      await streamLines(watchPath, onLine);
      attempt = 0;
    } catch (error) {
      if (!document.body.contains(table)) return;
      status.textContent = `${rows.size} ${r.plural} · reconnecting (${error.message})`;
      await new Promise((resume) => setTimeout(resume, Math.min(500 * 2 ** attempt, 5000)));
      continue;
    }
    // Ended by the server at its timeout, or aborted as the view changed: go on while shown.
    if (document.body.contains(table) && !ended) {
      status.textContent = `${rows.size} ${r.plural} · live`;
      await new Promise((resume) => setTimeout(resume, 200));
    }
  }
  if (ended && document.body.contains(table)) status.textContent = 'watch ended: ' + ended;
}

// ---------------------------------------------------------------- one object

const TABS = ['yaml', 'graph', 'events', 'history', 'timeline'];

async function showObject(view, r, name, tab) {
  const object = await json(resourcePath(r, name));
  const tabs = r.kind === 'Pod' ? [...TABS, 'logs', 'exec'] : TABS;
  const here = `#/o/${r.group || '_'}/${r.version}/${r.plural}/${encodeURIComponent(name)}`;
  view.append(
    el('h1', {}, `${r.kind} `, el('span', { id: 'object-name' }, name),
      el('small', {}, r.namespaced ? ` in ${state.namespace}` : '')),
    el('div', { class: 'tabs' }, tabs.map((t) => el('button', {
      'data-tab': t, class: t === tab ? 'current' : '', onclick: () => { location.hash = `${here}/${t}`; },
    }, t))),
    el('div', { id: 'tab-body' }),
  );
  const body = $('#tab-body');
  const show = {
    yaml: showYaml, graph: showGraph, events: showEvents, history: showHistory,
    timeline: showTimeline, logs: showLogs, exec: showExec,
  }[tab] || showYaml;
  await show(body, r, name, object);
}

function clean(object) {
  const copy = JSON.parse(JSON.stringify(object));
  if (copy.metadata) delete copy.metadata.managedFields;
  return copy;
}

async function showYaml(body, r, name, object) {
  const text = el('textarea', { id: 'yaml', spellcheck: 'false' });
  text.value = toYaml(clean(object));
  const message = el('div', { id: 'message' });
  const apply = async (force) => {
    message.className = '';
    message.textContent = 'applying…';
    const query = `?fieldManager=plinth-console${force ? '&force=true' : ''}`;
    try {
      const written = await json(resourcePath(r, name) + query, {
        method: 'PATCH',
        headers: { 'Content-Type': 'application/apply-patch+yaml' },
        body: text.value,
      });
      message.className = 'ok';
      message.textContent = `applied: resourceVersion ${written.metadata.resourceVersion}`;
      text.value = toYaml(clean(written));
    } catch (error) {
      message.className = 'error';
      message.textContent = `${error.code} ${error.status ? error.status.reason : ''}: ${error.message}`;
      if (error.code === 409 && !force) {
        message.append(el('br'), el('button', { id: 'force-apply', onclick: () => apply(true) },
          'Apply anyway (take the conflicting fields)'));
      }
    }
  };
  body.append(
    el('p', { class: 'muted' }, 'Edit and apply: a server-side apply as field manager plinth-console. ',
      'Keep metadata.resourceVersion to apply only over this version.'),
    text,
    el('div', { class: 'row' },
      el('button', { id: 'apply', class: 'primary', onclick: () => apply(false) }, 'Apply'),
      el('button', { id: 'reload', onclick: route }, 'Reload')),
    message,
  );
}

function objectPathOf(r, name) {
  return resourcePath(r, name);
}

async function showGraph(body, r, name) {
  const graph = await json(`${HISTORY}/graph${objectPathOf(r, name)}`);
  const describe = (node) => {
    const badges = [];
    if (node.controller) badges.push(el('span', { class: 'badge' }, 'controller'));
    if (node.blockOwnerDeletion) badges.push(el('span', { class: 'badge warn' }, 'blocks owner deletion'));
    for (const f of node.finalizers || []) badges.push(el('span', { class: 'badge warn' }, 'finalizer ' + f));
    if (node.deletionTimestamp) badges.push(el('span', { class: 'badge danger' }, 'deleting since ' + node.deletionTimestamp));
    if (node.exists === false) badges.push(el('span', { class: 'badge danger' }, 'gone'));
    const target = state.resources.find((x) => x.kind === node.kind && (node.apiVersion || '').endsWith(x.version));
    const label = `${node.kind}/${node.name}`;
    const link = target
      ? el('a', { href: `#/o/${target.group || '_'}/${target.version}/${target.plural}/${encodeURIComponent(node.name)}/graph` }, label)
      : label;
    return el('span', {}, link, badges);
  };
  const tree = (nodes) => el('ul', { class: 'graph' }, nodes.map((n) =>
    el('li', { 'data-kind': n.kind, 'data-name': n.name }, describe(n), n.dependents && n.dependents.length ? tree(n.dependents) : null)));
  body.append(
    el('h3', {}, 'Owners'),
    graph.owners.length ? tree(graph.owners) : el('p', { class: 'muted' }, 'none'),
    el('h3', {}, 'This object'),
    el('ul', { class: 'graph root', id: 'graph' }, el('li', { 'data-kind': graph.object.kind, 'data-name': graph.object.name },
      describe(graph.object), tree(graph.dependents))),
  );
}

async function showEvents(body, r, name, object) {
  const uid = object.metadata.uid;
  const ns = object.metadata.namespace || state.namespace;
  const list = await json(`/api/v1/namespaces/${encodeURIComponent(ns)}/events?fieldSelector=${encodeURIComponent('involvedObject.uid=' + uid)}`);
  const items = list.items.filter((e) => e.involvedObject && e.involvedObject.uid === uid);
  items.sort((a, b) => String(a.lastTimestamp || a.eventTime).localeCompare(String(b.lastTimestamp || b.eventTime)));
  body.append(items.length ? el('table', { id: 'events' },
    el('tr', {}, ['type', 'reason', 'age', 'from', 'message'].map((h) => el('th', {}, h))),
    items.map((e) => el('tr', {},
      el('td', {}, e.type), el('td', {}, e.reason), el('td', {}, age(e.lastTimestamp || e.eventTime)),
      el('td', {}, (e.source && e.source.component) || e.reportingComponent || ''), el('td', {}, e.message)))) :
    el('p', { class: 'muted' }, 'No events.'));
}

function diffBlock(text) {
  const pre = el('pre', { class: 'diff', id: 'diff' });
  for (const line of text.split('\n')) {
    const kind = line.startsWith('+') && !line.startsWith('+++') ? 'add'
      : line.startsWith('-') && !line.startsWith('---') ? 'del'
        : line.startsWith('@@') ? 'hunk' : '';
    pre.append(el('span', { class: kind }, line + '\n'));
  }
  return pre;
}

function who(provenance) {
  if (!provenance) return '';
  return provenance.user + (provenance.impersonator ? ` (by ${provenance.impersonator})` : '');
}

async function showHistory(body, r, name) {
  const history = await json(`${HISTORY}/revisions${objectPathOf(r, name)}?objects=false`);
  const diffArea = el('div', { id: 'diff-area' }, el('p', { class: 'muted' }, 'Pick a revision to see what it changed.'));
  const table = el('table', { id: 'revisions' },
    el('tr', {}, ['revision', 'time', 'type', 'user', 'operation', 'manager'].map((h) => el('th', {}, h))));
  for (const v of history.revisions) {
    const p = v.provenance || {};
    const tr = el('tr', {
      class: 'clickable', 'data-revision': v.revision,
      onclick: async () => {
        for (const row of table.querySelectorAll('tr.selected')) row.classList.remove('selected');
        tr.classList.add('selected');
        const text = await (await api(`${HISTORY}/diff${objectPathOf(r, name)}?to=${v.revision}`, { headers: { Accept: 'text/plain' } })).text();
        diffArea.replaceChildren(el('h3', {}, `revision ${v.revision}: ${v.type} by ${who(p)}`), diffBlock(text || '(no change)'));
      },
    }, el('td', {}, v.revision), el('td', {}, p.time || ''), el('td', {}, v.type), el('td', { class: 'user' }, who(p)),
    el('td', {}, (p.operation || '') + (p.subresource ? '/' + p.subresource : '')), el('td', {}, p.fieldManager || ''));
    table.append(tr);
  }
  body.append(table, diffArea);
}

async function showTimeline(body, r, name) {
  const timeline = await json(`${HISTORY}/timeline${objectPathOf(r, name)}`);
  body.append(el('table', { id: 'timeline' },
    el('tr', {}, ['time', 'object', 'what', 'by', 'details'].map((h) => el('th', {}, h))),
    timeline.steps.map((s) => el('tr', { 'data-type': s.type },
      el('td', {}, s.time), el('td', {}, `${s.object.kind}/${s.object.name}`), el('td', {}, s.type),
      el('td', {}, who(s.provenance).replace('system:serviceaccount:kube-system:', '')), el('td', {}, s.summary)))),
  timeline.truncated ? el('p', { class: 'muted' }, 'Cut short: the oldest steps are not shown.') : null);
}

async function showLogs(body, r, name, object) {
  const containers = (object.spec.containers || []).map((c) => c.name);
  const select = el('select', { id: 'container' }, containers.map((c) => el('option', { value: c }, c)));
  const out = el('pre', { id: 'logs' });
  const follow = el('button', { id: 'follow', class: 'primary' }, 'Follow');
  const status = el('span', { id: 'logs-status', class: 'muted' });
  follow.addEventListener('click', () => {
    stopAll();
    out.textContent = '';
    followLogs(out, status, `${resourcePath(r, name)}/log`, select.value);
  });
  body.append(el('div', { class: 'row' }, 'container', select, follow, status), out);
}

/** A log line's time in a form that sorts as text (`timestamps=true`: RFC 3339, nanoseconds). */
function logTime(time) {
  const [whole, fraction = ''] = time.replace(/Z$/, '').split('.');
  return `${whole}.${fraction.padEnd(9, '0')}`;
}

/**
 * Follows a container's log into `out` until the run ends or the view changes. A stream the
 * browser breaks (a network change) is followed again from the last line's second
 * (`sinceTime`), the lines already shown skipped by their timestamps.
 */
async function followLogs(out, status, path, container) {
  // A later follow (another container, or Follow again) replaces this one.
  const run = (followLogs.runs = (followLogs.runs || 0) + 1);
  const current = () => document.body.contains(out) && followLogs.runs === run;
  let last = '';
  let atLast = 0;
  for (let attempt = 0; current(); attempt++) {
    const since = last ? `&sinceTime=${encodeURIComponent(last.slice(0, 19) + 'Z')}` : '';
    let skip = atLast;
    status.textContent = 'following';
    try {
      await streamLines(`${path}?follow=true&timestamps=true&container=${encodeURIComponent(container)}${since}`, (line) => {
        const space = line.indexOf(' ');
        const time = space > 0 ? logTime(line.slice(0, space)) : last;
        if (last && time < last) return;
        if (last && time === last && skip > 0) {
          skip -= 1;
          return;
        }
        atLast = time === last ? atLast + 1 : 1;
        last = time;
        out.append((space > 0 ? line.slice(space + 1) : line) + '\n');
        out.scrollTop = out.scrollHeight;
      }, 'text/plain');
      // The run ended (or this follow was replaced): nothing more comes.
      if (current()) status.textContent = 'ended';
      return;
    } catch (error) {
      if (!current()) return;
      status.textContent = `reconnecting (${error.message})`;
      await new Promise((resume) => setTimeout(resume, Math.min(500 * 2 ** attempt, 5000)));
    }
  }
}

function base64url(text) {
  return btoa(unescape(encodeURIComponent(text))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

async function showExec(body, r, name, object) {
  const containers = (object.spec.containers || []).map((c) => c.name);
  const select = el('select', { id: 'exec-container' }, containers.map((c) => el('option', { value: c }, c)));
  const out = el('pre', { id: 'exec-output' });
  const input = el('input', { type: 'text', id: 'exec-command', placeholder: 'a command for the shell, then Enter', size: 60 });
  const start = el('button', { id: 'exec-start', class: 'primary' }, 'Open a shell');
  let socket = null;
  const send = (text) => {
    const bytes = new TextEncoder().encode(text);
    const frame = new Uint8Array(bytes.length + 1);
    frame[0] = 0;
    frame.set(bytes, 1);
    socket.send(frame);
  };
  start.addEventListener('click', () => {
    stopAll();
    out.textContent = '';
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const query = `command=sh&stdin=true&stdout=true&stderr=true&container=${encodeURIComponent(select.value)}`;
    const protocols = ['v4.channel.k8s.io'];
    if (state.token) protocols.push('base64url.bearer.authorization.k8s.io.' + base64url(state.token));
    socket = new WebSocket(`${scheme}//${location.host}${resourcePath(r, name)}/exec?${query}`, protocols);
    socket.binaryType = 'arraybuffer';
    state.stops.push(() => socket.close());
    socket.addEventListener('open', () => { out.append('[connected]\n'); input.focus(); });
    socket.addEventListener('message', (message) => {
      const data = new Uint8Array(message.data);
      if (data.length === 0) return;
      const text = new TextDecoder().decode(data.slice(1));
      if (data[0] === 1 || data[0] === 2) out.append(text);
      else if (data[0] === 3 && text.includes('Failure')) out.append(`\n[${text}]\n`);
      out.scrollTop = out.scrollHeight;
    });
    socket.addEventListener('close', () => out.append('\n[closed]\n'));
  });
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && socket && socket.readyState === WebSocket.OPEN) {
      out.append('$ ' + input.value + '\n');
      send(input.value + '\n');
      input.value = '';
    }
  });
  body.append(el('div', { class: 'row' }, 'container', select, start), out, el('div', { class: 'row' }, input));
}

// ---------------------------------------------------------------- who can

function matches(list, value) {
  return (list || []).includes('*') || (list || []).includes(value);
}

async function showWhoCan(view) {
  const verb = el('input', { type: 'text', id: 'whocan-verb', value: 'get', size: 10 });
  const resource = el('input', { type: 'text', id: 'whocan-resource', value: 'pods', size: 24, placeholder: 'pods or deployments.apps' });
  const out = el('div', { id: 'whocan-result' });
  const run = async () => {
    out.replaceChildren('…');
    const [plural, ...rest] = resource.value.trim().split('.');
    const group = rest.join('.');
    const ns = state.namespace;
    try {
      const [clusterRoles, roles, clusterBindings, bindings] = await Promise.all([
        json('/apis/rbac.authorization.k8s.io/v1/clusterroles'),
        json(`/apis/rbac.authorization.k8s.io/v1/namespaces/${encodeURIComponent(ns)}/roles`),
        json('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings'),
        json(`/apis/rbac.authorization.k8s.io/v1/namespaces/${encodeURIComponent(ns)}/rolebindings`),
      ]);
      const rulesOf = (ref) => {
        const pool = ref.kind === 'ClusterRole' ? clusterRoles.items : roles.items;
        const role = pool.find((x) => x.metadata.name === ref.name);
        return (role && role.rules) || [];
      };
      const allows = (rules) => rules.some((rule) => matches(rule.verbs, verb.value.trim())
        && matches(rule.apiGroups, group) && matches(rule.resources, plural));
      const rows = [];
      for (const [binding, scope] of [...clusterBindings.items.map((b) => [b, 'cluster']), ...bindings.items.map((b) => [b, ns])]) {
        if (!allows(rulesOf(binding.roleRef))) continue;
        for (const s of binding.subjects || []) {
          rows.push(el('tr', {}, el('td', {}, s.kind), el('td', { class: 'subject' }, (s.namespace ? s.namespace + '/' : '') + s.name),
            el('td', {}, `${binding.kind}/${binding.metadata.name}`), el('td', {}, `${binding.roleRef.kind}/${binding.roleRef.name}`), el('td', {}, scope)));
        }
      }
      out.replaceChildren(el('p', {}, `Who may ${verb.value} ${resource.value} in ${ns} (members of system:masters may do anything):`),
        el('table', { id: 'whocan-table' }, el('tr', {}, ['kind', 'subject', 'through', 'role', 'scope'].map((h) => el('th', {}, h))), rows));
    } catch (error) {
      out.replaceChildren(el('p', { class: 'error' }, error.message));
    }
  };
  view.append(el('h1', {}, 'Who can'),
    el('div', { class: 'row' }, 'verb', verb, 'resource', resource, el('button', { id: 'whocan-run', class: 'primary', onclick: run }, 'Show')),
    out);
}

// ---------------------------------------------------------------- start

$('#login').addEventListener('click', () => signIn($('#token').value.trim(), false));
$('#cert-login').addEventListener('click', () => signIn('', true));
$('#logout').addEventListener('click', () => {
  sessionStorage.clear();
  state.token = '';
  state.user = null;
  $('#whoami').textContent = '';
  $('#logout').hidden = true;
  showLogin();
});
$('#namespace').addEventListener('change', (event) => {
  state.namespace = event.target.value;
  sessionStorage.setItem('plinth-namespace', state.namespace);
  if (location.hash.startsWith('#/o/')) {
    const parts = location.hash.split('/');
    location.hash = parts.slice(0, 5).join('/').replace('#/o/', '#/r/');
  } else {
    route();
  }
});
window.addEventListener('hashchange', route);

if (state.token || state.certificate) {
  signIn(state.token, state.certificate).then((ok) => { if (!ok) showLogin(); });
} else {
  showLogin();
}
