/**
 * A preemptible server's end, in JupyterLab: the server says at `gpuhub/stopping` that SIGTERM came
 * (extension/stopping.py); this warns the user and saves every unsaved document at once, within the pod's
 * grace period. Unsaved edits live only in the browser, so only the browser can save them.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { DocumentWidget } from '@jupyterlab/docregistry';

import { request } from './api';

/** Must match POLL_S in extension/stopping.py. */
export const STOPPING_POLL_MS = 5000;

interface IStopping {
  preemptible: boolean;
  stopping: boolean;
  seconds_left?: number;
  message?: string;
}

/** Save every open document with unsaved changes; the number saved and the paths that failed. */
export async function saveAll(app: JupyterFrontEnd): Promise<{ saved: number; failed: string[] }> {
  const dirty: DocumentWidget[] = [];
  for (const widget of app.shell.widgets('main')) {
    if (widget instanceof DocumentWidget && widget.context.model.dirty) {
      dirty.push(widget);
    }
  }
  const results = await Promise.allSettled(dirty.map(w => w.context.save()));
  const failed = dirty.filter((_, i) => results[i].status === 'rejected').map(w => w.context.path);
  return { saved: dirty.length - failed.length, failed };
}

/** Poll while the server is preemptible; on its end, one warning that says what was saved. */
export function watchStopping(app: JupyterFrontEnd): void {
  let timer: ReturnType<typeof setInterval> | undefined;
  const check = async () => {
    let state: IStopping;
    try {
      state = await request<IStopping>('stopping');
    } catch {
      return; // the server is gone or busy: nothing more to do from here
    }
    if (!state.preemptible) {
      clearInterval(timer); // never preempted: no need to ask again
      return;
    }
    if (!state.stopping) {
      return;
    }
    clearInterval(timer);
    const head = state.message ?? 'This server is stopping.';
    const id = Notification.warning(`${head} Saving…`, { autoClose: false });
    const { saved, failed } = await saveAll(app);
    const done = failed.length
      ? `Could not save ${failed.join(', ')}: download what you need now.`
      : saved
        ? `Saved ${saved} open document${saved === 1 ? '' : 's'}.`
        : 'Every open document was already saved.';
    Notification.update({ id, message: `${head} ${done}`, type: failed.length ? 'error' : 'warning', autoClose: false });
  };
  timer = setInterval(() => void check(), STOPPING_POLL_MS);
  void check();
}
