/** Polls the user's jobs for the panel, and turns state changes into notifications. */
import { Notification } from '@jupyterlab/apputils';

import { describe, request } from './api';
import { JobsPanel } from './panel';
import { CLIENT_FINAL, HAS_RUN, ILabJob, ILabJobList } from './wire';

const BUSY_MS = 3000; // while a job is unfinished
const IDLE_MS = 20000;

/** The notification for a change from `before` to `job`, or null when it is not worth one (pure). */
export function change(before: ILabJob | undefined, job: ILabJob): { text: string; type: Notification.TypeOptions } | null {
  const was = before?.state;
  if (was === job.state && (before?.preempted ?? 0) >= (job.preempted ?? 0)) {
    return null;
  }
  if ((job.preempted ?? 0) > (before?.preempted ?? 0) && !CLIENT_FINAL.includes(job.state)) {
    return { text: `GPU job ${job.name} was preempted; it resumes from its checkpoint.`, type: 'warning' };
  }
  switch (job.state) {
    case 'Admitted':
      return { text: `GPU job ${job.name} was admitted and is starting.`, type: 'info' };
    case 'Preempted-and-resumed':
      return { text: `GPU job ${job.name} resumed after preemption.`, type: 'info' };
    case 'Succeeded':
      return { text: `GPU job ${job.name} succeeded.`, type: 'success' };
    case 'Failed':
      return { text: `GPU job ${job.name} failed: ${job.message || describe(job)}`, type: 'error' };
    default:
      return null;
  }
}

export class JobWatcher {
  constructor(private panel: JobsPanel, private open: (path: string) => void) {
    panel.refreshRequested = () => void this.refresh();
  }

  start(): void {
    void this.refresh();
  }

  /** A job just submitted from this page: shown at once, and followed from its first state. */
  submitted(job: ILabJob): void {
    this.known.set(job.name, job);
    Notification.info(`GPU job ${job.name} submitted: ${describe(job)}.`, { autoClose: 5000 });
    void this.refresh();
  }

  private async refresh(): Promise<void> {
    clearTimeout(this.timer);
    let jobs: ILabJob[] = [];
    try {
      jobs = (await request<ILabJobList>('jobs')).jobs;
      this.panel.render(jobs);
    } catch (e) {
      this.panel.render([], (e as Error).message);
    }
    for (const job of jobs) {
      const note = this.loaded ? change(this.known.get(job.name), job) : null;
      this.known.set(job.name, job);
      if (note) {
        const actions = HAS_RUN.includes(job.state)
          ? [{ label: 'Open output', callback: () => this.open(job.output_path) }]
          : [];
        Notification.emit(note.text, note.type, { autoClose: CLIENT_FINAL.includes(job.state) ? false : 8000, actions });
      }
    }
    this.loaded = true; // jobs that were already there when the page opened are not announced again
    const busy = jobs.some(j => !CLIENT_FINAL.includes(j.state));
    this.timer = setTimeout(() => void this.refresh(), busy ? BUSY_MS : IDLE_MS);
  }

  private known = new Map<string, ILabJob>();
  private loaded = false;
  private timer?: ReturnType<typeof setTimeout>;
}
