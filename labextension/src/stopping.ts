/**
 * A preemptible server's end, in JupyterLab: the server says that SIGTERM came (jupyterhub_gpu/singleuser/stopping.py) as an
 * event on its event bus, which arrives at once even in a background tab, and at `gpuhub/stopping`, polled as a
 * fallback; this warns the user and saves every unsaved document at once, within the pod's grace period.
 * Unsaved edits live only in the browser, so only the browser can save them.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { DocumentWidget } from '@jupyterlab/docregistry';

import { request } from './api';

/** Must match POLL_S and STOPPING_SCHEMA in jupyterhub_gpu/singleuser/stopping.py. */
export const STOPPING_POLL_MS = 5000;
export const STOPPING_SCHEMA = 'https://events.jupyter.org/jupyterhub-gpu/stopping/v1';

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

/** Listen and poll while the server is preemptible; on its end, one warning that says what was saved. */
export function watchStopping(app: JupyterFrontEnd): void {
  let timer: ReturnType<typeof setInterval> | undefined;
  let told = false;
  const stopping = async (message: string | undefined) => {
    if (told) {
      return;
    }
    told = true;
    clearInterval(timer);
    // JupyterLab cuts a notification at 140 characters: a short headline (the server's whole sentence is in the
    // console); what was saved must stay visible
    console.warn('gpuhub:', message);
    const head = 'This server is stopping (likely preempted for a GPU job).';
    const id = Notification.warning(`${head} Saving your open notebooks…`, { autoClose: false });
    const { saved, failed } = await saveAll(app);
    const done = failed.length
      ? `Could not save ${failed.join(', ')}: download it now.`
      : saved
        ? `Saved ${saved} open document${saved === 1 ? '' : 's'}.`
        : 'Every open document was already saved.';
    Notification.update({ id, message: `${head} ${done}`, type: failed.length ? 'error' : 'warning', autoClose: false });
  };
  app.serviceManager.events.stream.connect((_, emission) => {
    if (emission.schema_id === STOPPING_SCHEMA) {
      void stopping(emission.message as string | undefined);
    }
  });
  const check = async () => {
    let state: IStopping;
    try {
      state = await request<IStopping>('stopping');
    } catch {
      return; // the server is gone or busy: nothing more to do from here
    }
    if (!state.preemptible) {
      clearInterval(timer); // never preempted: no need to ask again
    } else if (state.stopping) {
      void stopping(state.message);
    }
  };
  timer = setInterval(() => void check(), STOPPING_POLL_MS);
  void check();
}
