/**
 * The single-user server's gpuhub routes (jupyterhub_gpu/singleuser/server.py). The browser authenticates to its own
 * Jupyter server as every JupyterLab request does; the server calls gpu-jobs and the culler with its token.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { ILabJob } from './wire';

/** Must match LAB_API_PREFIX, LAB_COMM_TARGET and IDEMPOTENCY_KEY_HEADER in jupyterhub_gpu/contract.py. */
export const API_PREFIX = 'gpuhub';
export const COMM_TARGET = 'gpuhub.frontend';
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';

/** The culler's warning about this server (not a gpu-jobs answer, so not in wire.ts). */
export interface ICullWarning {
  server: string;
  profile: string;
  reason: string;
  cull_in_s: number;
  cull_at: string;
  message: string;
  dry_run?: boolean;
}

/** A request to the gpuhub routes; a refusal throws an Error with the server's own message. */
export async function request<T>(path: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, API_PREFIX, path);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  if (!response.ok) {
    let message = text || response.statusText;
    try {
      message = JSON.parse(text).message || message;
    } catch {
      // not JSON: keep the text
    }
    throw new Error(message); // a sentence for people; the status code is no help to them
  }
  return JSON.parse(text) as T; // every gpuhub route answers JSON
}

/** A fresh Idempotency-Key per submission: 32 hex digits (getRandomValues works outside secure contexts too). */
export function newIdempotencyKey(): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
}

/** A POST under one Idempotency-Key, sent again with the same key when no answer came (a dropped connection,
 * a restarting server): the retry gets the job the first try made, never a second one. */
export async function postOnce<T>(path: string, body: string, attempts = 3): Promise<T> {
  const headers = { [IDEMPOTENCY_KEY_HEADER]: newIdempotencyKey() };
  for (let attempt = 1; ; attempt++) {
    try {
      return await request<T>(path, { method: 'POST', body, headers });
    } catch (e) {
      if (!(e instanceof ServerConnection.NetworkError) || attempt >= attempts) {
        throw e;
      }
      await new Promise(resolve => setTimeout(resolve, 1000 * attempt));
    }
  }
}

/** What the panel and notifications say about a job: the server's summary (the same line as the
 * `%gpu_submit` status widget: queue position and ETA, current cell, preemptions). */
export function describe(job: ILabJob): string {
  return job.summary || job.state;
}
