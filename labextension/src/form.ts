/** The submit form: profile (with free slots and queue length), parameters, priority, timeout. */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { request } from './api';
import { IProfileEntry, IProfiles } from './wire';

export interface IChoice {
  profile: string;
  parameters: string;
  priority?: string;
  timeout?: string;
}

class FormBody extends Widget {
  constructor(profiles: IProfileEntry[]) {
    super({ node: document.createElement('form') });
    this.addClass('gpuhub-form');
    const field = (label: string, input: HTMLElement) => {
      const row = document.createElement('label');
      row.textContent = label;
      row.appendChild(input);
      this.node.appendChild(row);
    };
    this.profile = document.createElement('select');
    this.profile.name = 'profile';
    for (const p of profiles) {
      const capacity = [
        p.free !== null && p.free !== undefined ? `${p.free} free` : '',
        p.queued !== null && p.queued !== undefined ? `${p.queued} queued` : ''
      ].filter(Boolean);
      const option = new Option(
        capacity.length ? `${p.display_name} (${capacity.join(', ')})` : p.display_name,
        p.slug
      );
      this.profile.appendChild(option);
    }
    field('GPU profile', this.profile);
    this.parameters = document.createElement('textarea');
    this.parameters.name = 'parameters';
    this.parameters.placeholder = 'name=value, one per line (the cell tagged "parameters")';
    field('Parameters', this.parameters);
    this.priority = document.createElement('select');
    this.priority.name = 'priority';
    const priorities = () => {  // the ones this profile allows this user
      const chosen = profiles.find(p => p.slug === this.profile.value);
      this.priority.replaceChildren(new Option('profile default', ''));
      for (const name of chosen?.priorities || []) {
        this.priority.appendChild(new Option(name, name));
      }
    };
    priorities();
    this.profile.addEventListener('change', priorities);
    field('Priority', this.priority);
    this.timeout = document.createElement('input');
    this.timeout.name = 'timeout';
    this.timeout.placeholder = 'e.g. 2h (default: the profile limit)';
    field('Timeout', this.timeout);
  }

  getValue(): IChoice {
    return {
      profile: this.profile.value,
      parameters: this.parameters.value,
      priority: this.priority.value || undefined,
      timeout: this.timeout.value.trim() || undefined
    };
  }

  readonly profile: HTMLSelectElement;
  readonly parameters: HTMLTextAreaElement;
  readonly priority: HTMLSelectElement;
  readonly timeout: HTMLInputElement;
}

/** The user's choice, or null when cancelled or when there is no GPU profile to offer. */
export async function askSubmit(path: string): Promise<IChoice | null> {
  let info: IProfiles;
  try {
    info = await request('profiles');
  } catch (e) {
    await showDialog({ title: 'GPU queue unavailable', body: (e as Error).message, buttons: [Dialog.okButton()] });
    return null;
  }
  if (!info.profiles.length) {
    await showDialog({ title: 'No GPU profile', body: 'You have no GPU profile to run jobs on.', buttons: [Dialog.okButton()] });
    return null;
  }
  const result = await showDialog<IChoice>({
    title: `Run ${path} on the GPU queue`,
    body: new FormBody(info.profiles),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Submit' })]
  });
  return result.button.accept && result.value ? result.value : null;
}
