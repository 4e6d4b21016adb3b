/**
 * jupyterhub-gpu in JupyterLab: "Run on GPU queue" (save, then submit), the GPU jobs panel, and
 * notifications for job state changes and for this server's culling warnings, and a preemptible server's
 * warning before it stops (with its open notebooks saved).
 */
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification, ToolbarButton } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { COMM_TARGET, ICullWarning, postOnce, request } from './api';
import { askSubmit } from './form';
import { JobsPanel } from './panel';
import { watchStopping } from './stopping';
import { JobWatcher } from './watch';
import { ILabJob } from './wire';

const RUN = 'gpuhub:run-on-gpu-queue';
const CULL_POLL_MS = 60_000;

/** Save the notebook, then ask for the job's settings and submit the saved version. */
async function runOnQueue(panel: NotebookPanel, watcher: JobWatcher): Promise<void> {
  try {
    await panel.context.ready;
    await panel.context.save(); // what runs is what the user sees now
  } catch (e) {
    Notification.error(`Not submitted: saving ${panel.context.path} failed (${(e as Error).message}).`, {
      autoClose: false
    });
    return;
  }
  const choice = await askSubmit(panel.context.path);
  if (!choice) {
    return;
  }
  try {
    const job = await postOnce<ILabJob>('jobs', JSON.stringify({ path: panel.context.path, ...choice }));
    watcher.submitted(job);
  } catch (e) {
    Notification.error(`GPU job not submitted: ${(e as Error).message}`, { autoClose: false });
  }
}

/** `%gpu_submit` asks through this comm to save the notebook first (see jupyterhub_gpu/singleuser/frontend.py). */
function offerSave(panel: NotebookPanel): void {
  const opened = new Set<string>();
  panel.sessionContext.statusChanged.connect((ctx, status) => {
    const kernel = ctx.session?.kernel;
    if (!kernel || status !== 'idle' || opened.has(kernel.id)) {
      return;
    }
    opened.add(kernel.id);
    try {
      const comm = kernel.createComm(COMM_TARGET);
      comm.onMsg = msg => {
        if ((msg.content.data as { op?: string }).op === 'save') {
          void panel.context.save();
        }
      };
      comm.open({ path: panel.context.path });
    } catch (e) {
      console.warn('gpuhub: no save comm for this kernel', e);
    }
  });
}

/** This server's culling warnings as one notification, kept up to date, with "Keep my server" (which
 * reports activity to the hub at once); dismissed when the culler no longer warns. */
function watchCulling(): void {
  let shown: string | null = null;
  const keep = () => {
    request('keep', { method: 'POST', body: '{}' })
      .then(() => {
        if (shown) {
          Notification.dismiss(shown);
          shown = null;
        }
        Notification.success('Kept: your server counts as active again.', { autoClose: 5000 });
      })
      .catch(e => Notification.error(`Could not keep the server: ${(e as Error).message}`));
  };
  const check = async () => {
    let warnings: ICullWarning[] = [];
    try {
      warnings = (await request<{ warnings: ICullWarning[] }>('culling')).warnings;
    } catch (e) {
      console.warn('gpuhub: culling warnings unavailable', e);
      return;
    }
    const w = warnings[0];
    if (!w) {
      if (shown) {
        Notification.dismiss(shown);
        shown = null;
      }
      return;
    }
    const message = w.message; // the culler's own words: which server, the time left, and why
    const options = {
      autoClose: false as const,
      actions: [{ label: 'Keep my server', displayType: 'accent' as const, callback: keep }]
    };
    if (!shown || !Notification.update({ id: shown, message, type: 'warning', ...options })) {
      shown = Notification.warning(message, options);
    }
  };
  void check();
  setInterval(check, CULL_POLL_MS);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterhub-gpu-labextension:plugin',
  description: 'Run notebooks on the GPU queue, follow the jobs, get notified.',
  autoStart: true,
  requires: [INotebookTracker, ILabShell],
  optional: [ICommandPalette],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, shell: ILabShell, palette: ICommandPalette | null) => {
    const open = (path: string) => app.commands.execute('docmanager:open', { path });
    const panel = new JobsPanel(open);
    const watcher = new JobWatcher(panel, open);
    shell.add(panel, 'left', { rank: 900 });

    app.commands.addCommand(RUN, {
      label: 'Run on GPU queue',
      caption: 'Save this notebook, then run it as a queued GPU job',
      isEnabled: () => tracker.currentWidget !== null,
      execute: async () => {
        const current = tracker.currentWidget;
        if (current) {
          await runOnQueue(current, watcher);
        }
      }
    });
    palette?.addItem({ command: RUN, category: 'GPU' });
    tracker.widgetAdded.connect((_, nb) => {
      const button = new ToolbarButton({
        label: 'Run on GPU queue',
        tooltip: 'Save this notebook, then run it as a queued GPU job',
        className: 'gpuhub-run-button',
        onClick: () => void runOnQueue(nb, watcher)
      });
      nb.toolbar.insertItem(10, 'gpuhub-run', button);
      offerSave(nb);
    });
    watcher.start();
    watchCulling();
    watchStopping(app);
  }
};

export default plugin;
