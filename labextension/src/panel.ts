/** The GPU jobs side panel: the user's jobs with live state, queue position, cell progress and actions. */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { describe, request } from './api';
import { CLIENT_FINAL, HAS_RUN, ILabJob } from './wire';

const gpuIcon = new LabIcon({
  name: 'gpuhub:gpu',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16"><g class="jp-icon3" fill="#616161">' +
    '<path d="M4 6h16v12H4z" fill-opacity=".25"/><path d="M2 5h20v2H2zm0 12h20v2H2zM7 9h4v6H7zm6 0h4v6h-4z"/></g></svg>'
});

export class JobsPanel extends Widget {
  constructor(private open: (path: string) => void) {
    super();
    this.id = 'gpuhub-jobs';
    this.addClass('gpuhub-panel');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPU jobs';
    const heading = document.createElement('h2');
    heading.textContent = 'GPU jobs';
    this.list = document.createElement('div');
    this.list.className = 'gpuhub-jobs';
    this.note = document.createElement('div');
    this.note.className = 'gpuhub-note';
    this.node.append(heading, this.note, this.list);
  }

  /** Redraw from the latest list (newest first); `error` when the last refresh failed. */
  render(jobs: ILabJob[], error?: string): void {
    this.note.textContent = error ? `Last update failed: ${error}` : jobs.length ? '' : 'No GPU jobs yet.';
    this.list.replaceChildren(...jobs.map(job => this.row(job)));
  }

  private row(job: ILabJob): HTMLElement {
    const row = document.createElement('div');
    row.className = 'gpuhub-job';
    row.dataset.job = job.name;
    row.dataset.state = job.state;
    const name = document.createElement('div');
    name.className = 'gpuhub-job-name';
    name.textContent = `${job.name} · ${job.notebook ?? ''}`;
    const state = document.createElement('div');
    state.className = 'gpuhub-job-state';
    state.textContent = describe(job);
    const detail = document.createElement('div');
    detail.className = 'gpuhub-job-detail';
    detail.textContent = [job.profile, job.priority && `priority ${job.priority}`, job.message]
      .filter(Boolean)
      .join(' · ');
    const actions = document.createElement('div');
    actions.className = 'gpuhub-job-actions';
    const button = (label: string, act: () => void) => {
      const b = document.createElement('button');
      b.className = 'jp-Button jp-mod-styled jp-mod-reject';
      b.textContent = label;
      b.onclick = act;
      actions.appendChild(b);
    };
    if (HAS_RUN.includes(job.state)) {
      button('Open output', () => this.open(job.output_path));
      button('Logs', () => void this.logs(job.name));
    }
    if (!CLIENT_FINAL.includes(job.state)) {
      button('Cancel', () => void this.cancel(job.name));
    }
    row.append(name, state, detail);
    if (job.state === 'Queued' && job.kueue_message) {
      const raw = document.createElement('details');
      raw.className = 'gpuhub-job-kueue';
      const summary = document.createElement('summary');
      summary.textContent = 'details';
      const said = document.createElement('code');
      said.textContent = `Kueue says: ${job.kueue_message}`;
      raw.append(summary, said);
      row.append(raw);
    }
    row.append(actions);
    return row;
  }

  private async logs(name: string): Promise<void> {
    const pre = document.createElement('pre');
    pre.className = 'gpuhub-log';
    try {
      pre.textContent = (await request<{ log: string }>(`jobs/${encodeURIComponent(name)}/logs`)).log || '(no log yet)';
    } catch (e) {
      pre.textContent = (e as Error).message;
    }
    await showDialog({ title: `Log of ${name}`, body: new Widget({ node: pre }), buttons: [Dialog.okButton()] });
  }

  private async cancel(name: string): Promise<void> {
    const sure = await showDialog({
      title: `Cancel ${name}?`,
      body: 'Its pods stop; its output folder and checkpoints stay.',
      buttons: [Dialog.cancelButton({ label: 'Keep running' }), Dialog.warnButton({ label: 'Cancel job' })]
    });
    if (!sure.button.accept) {
      return;
    }
    try {
      await request(`jobs/${encodeURIComponent(name)}`, { method: 'DELETE' });
      this.refreshRequested?.();
    } catch (e) {
      await showDialog({ title: 'Not cancelled', body: (e as Error).message, buttons: [Dialog.okButton()] });
    }
  }

  refreshRequested?: () => void;
  private list: HTMLElement;
  private note: HTMLElement;
}
