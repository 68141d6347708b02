// The clusters panel: every running mwnotebook cluster and its workers, from the server extension's
// REST API (mwnotebook/server/handlers.py), with interrupt, restart, stop and "open the notebook".
// Works in JupyterLab 4 and Notebook 7 (both have a left area and the same services).
// Each cluster is the state document whose shape is written down once in mwnotebook/registry/document.py
// (ClusterDocument: id, owner, engine, hosts, state, cell, last_error, workers[] with index, role, task,
// host, pid, state, tf_config, last_error), plus what mwnotebook/server/service.py adds to each:
// notebook, uptime, and each worker's cpu_percent, memory_bytes, memory_limit, near_limit and usage_age
// (read here for a worker on the server's machine; the notebook's last reading for the others).
import { ICommandPalette, Clipboard, showDialog, Dialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

const PANEL_ID = 'mwnotebook-clusters';
const OPEN = 'mwnotebook-clusters:open';
const FAST = 1000; // ms between polls while the panel is visible: a change shows within ~2 s
const SLOW = 15000; // while hidden
const MAX_BACKOFF = 30000; // after errors
// s: a worker's figures older than this say when they were read (a remote worker's are read by the
// notebook every 2 s while a cell runs and at each %mwcluster status, not between cells)
const STALE = 10;

const icon = new LabIcon({
  name: 'mwnotebook:clusters',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<rect x="2" y="3" width="20" height="5" rx="1"/><rect x="2" y="10" width="20" height="5" rx="1"/>' +
    '<rect x="2" y="17" width="20" height="5" rx="1"/></g></svg>'
});

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === 'onclick') node.addEventListener('click', value);
    else if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

function duration(seconds) {
  const s = Math.floor(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function megabytes(bytes) {
  return bytes === null || bytes === undefined ? '' : `${(bytes / 1048576).toFixed(0)} MB`;
}

class ClustersPanel extends Widget {
  constructor(app) {
    super();
    this.app = app;
    this.settings = ServerConnection.makeSettings();
    this.id = PANEL_ID;
    this.addClass('mw-clusters');
    this.title.icon = icon;
    this.title.caption = 'mwnotebook clusters';
    this.title.label = 'mwnotebook clusters'; // Notebook 7 lists side panels by label (View menu)
    this.expanded = new Set();
    this.openConfigs = new Set();
    this.clusters = [];
    this.failures = 0;
    this.lastText = '';
    this.timer = null;
    this.message = '';
    this.render();
    this.poll();
  }

  url(...parts) {
    return URLExt.join(this.settings.baseUrl, 'mwnotebook/api/clusters', ...parts);
  }

  async poll() {
    clearTimeout(this.timer);
    let delay = this.isVisible && document.visibilityState !== 'hidden' ? FAST : SLOW;
    try {
      const response = await ServerConnection.makeRequest(this.url(), {}, this.settings);
      if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
      const text = await response.text();
      this.failures = 0;
      if (text !== this.lastText) {
        this.lastText = text;
        this.clusters = JSON.parse(text).clusters;
        this.message = '';
        this.render();
      }
    } catch (error) {
      this.failures += 1;
      delay = Math.min(MAX_BACKOFF, FAST * 2 ** this.failures);
      this.message = `cannot reach the clusters API (${error.message}); retrying in ${delay / 1000} s`;
      this.render();
    }
    this.timer = setTimeout(() => this.poll(), delay);
  }

  onAfterShow() {
    this.poll(); // at once, then fast
  }

  dispose() {
    clearTimeout(this.timer);
    super.dispose();
  }

  async act(cluster, action) {
    const label = cluster.notebook || cluster.id;
    if (action !== 'interrupt') {
      const answer = await showDialog({
        title: `${action === 'stop' ? 'Stop' : 'Restart'} this cluster?`,
        body: `${label}: ${cluster.workers.length} workers. Their variables are lost.`,
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: action === 'stop' ? 'Stop' : 'Restart' })]
      });
      if (!answer.button.accept) return;
    }
    const init = action === 'stop' ? { method: 'DELETE' } : { method: 'POST' };
    const path = action === 'stop' ? [cluster.id] : [cluster.id, action];
    const response = await ServerConnection.makeRequest(this.url(...path), init, this.settings);
    if (!response.ok) {
      let reason = response.statusText;
      try { reason = (await response.json()).message || reason; } catch (e) { /* not JSON */ }
      this.message = `${action} failed: ${reason}`;
      this.render();
    }
    this.poll();
  }

  render() {
    const body = [el('h2', {}, 'mwnotebook clusters')];
    if (!this.clusters.length) body.push(el('div', { class: 'mw-empty' }, 'No cluster is running.'));
    for (const cluster of this.clusters) body.push(this.renderCluster(cluster));
    if (this.message) body.push(el('div', { class: 'mw-status mw-error' }, this.message));
    this.node.replaceChildren(...body);
  }

  renderCluster(c) {
    const open = this.expanded.has(c.id);
    const notebook = c.notebook ? c.notebook.split('/').pop() : `pid ${c.owner && c.owner.pid}`;
    const head = el('div', {
      class: 'mw-cluster-head', title: 'show or hide the workers',
      onclick: () => { open ? this.expanded.delete(c.id) : this.expanded.add(c.id); this.render(); }
    },
      el('span', {}, open ? '▾' : '▸'),
      el('span', { class: 'mw-cluster-title' }, notebook),
      el('span', { class: `mw-badge mw-cluster-state mw-state-${c.state}` }, c.state),
      el('span', { class: 'mw-meta' }, `${c.engine} · ${c.workers.length} workers · ${(c.hosts || []).join(', ')} · up ${duration(c.uptime)}`));
    const actions = el('div', { class: 'mw-actions' },
      el('button', { class: 'mw-interrupt', onclick: () => this.act(c, 'interrupt') }, 'Interrupt'),
      c.state === 'orphaned' ? null : el('button', { class: 'mw-restart', onclick: () => this.act(c, 'restart') }, 'Restart'),
      el('button', { class: 'mw-stop', onclick: () => this.act(c, 'stop') }, 'Stop'),
      c.notebook ? el('button', {
        class: 'mw-open', onclick: () => this.app.commands.execute('docmanager:open', { path: c.notebook })
      }, 'Open notebook') : null);
    const node = el('div', { class: 'mw-cluster', 'data-id': c.id, 'data-state': c.state }, head, actions);
    if (c.cell) node.append(el('div', { class: 'mw-cell', title: c.cell.text },
      `running ${duration(Date.now() / 1000 - c.cell.since)}: ${c.cell.text.split('\n')[0]}`));
    if (c.last_error) node.append(el('div', { class: 'mw-error' }, c.last_error));
    if (open) node.append(this.renderWorkers(c));
    return node;
  }

  renderWorkers(c) {
    const cards = c.workers.map(w => {
      const key = `${c.id}:${w.index}`;
      const config = JSON.stringify(w.tf_config, null, 1);
      const usage = [w.cpu_percent === null || w.cpu_percent === undefined ? null : `CPU ${w.cpu_percent.toFixed(0)}%`,
        w.memory_bytes ? megabytes(w.memory_bytes) + (w.memory_limit ? ` of ${megabytes(w.memory_limit)}` : '') : null,
        w.usage_age > STALE ? `read ${duration(w.usage_age)} ago` : null].filter(Boolean).join(' · ');
      const details = el('details', { class: 'mw-tfconfig' },
        el('summary', {}, el('span', { class: 'mw-tfconfig-label' }, 'TF_CONFIG'), ' ',
          el('button', {
            class: 'mw-copy', title: 'copy this TF_CONFIG',
            onclick: event => { event.preventDefault(); Clipboard.copyToSystem(JSON.stringify(w.tf_config)); }
          }, 'Copy')),
        el('pre', {}, config));
      details.open = this.openConfigs.has(key);
      details.addEventListener('toggle', () => details.open ? this.openConfigs.add(key) : this.openConfigs.delete(key));
      return el('div', { class: 'mw-worker', 'data-index': w.index },
        el('div', {},
          el('b', {}, `[${w.index}] ${w.role}`), ` ${w.task ? '(' + w.task + ') ' : ''}on ${w.host || '?'} · pid `,
          el('span', { class: 'mw-pid' }, w.pid === null || w.pid === undefined ? '' : String(w.pid)), ' ',
          el('span', { class: `mw-badge mw-state-${w.state}` }, w.state),
          usage ? el('span', { class: 'mw-meta mw-usage' }, ` ${usage}`) : null,
          w.near_limit ? el('span', {
            class: 'mw-badge mw-near-limit', title: 'at 90 % of its memory limit or more: one large allocation from being killed'
          }, 'near its memory limit') : null),
        details,
        w.last_error ? el('div', { class: 'mw-error' }, w.last_error) : null);
    });
    return el('div', { class: 'mw-workers' }, ...cards);
  }
}

const plugin = {
  id: 'mwnotebook-clusters:panel',
  description: 'A sidebar panel with every running mwnotebook cluster and its workers.',
  autoStart: true,
  optional: [ICommandPalette],
  activate: (app, palette) => {
    const panel = new ClustersPanel(app);
    app.shell.add(panel, 'left', { rank: 950 });
    app.commands.addCommand(OPEN, {
      label: 'Show mwnotebook clusters',
      execute: () => app.shell.activateById(PANEL_ID)
    });
    if (palette) palette.addItem({ command: OPEN, category: 'mwnotebook' });
  }
};

export default plugin;
