"""`gpuhub`: validate and render the profiles file, check a cluster against it, report GPU use (a development
checkout adds `gpuhub dev` and `gpuhub cluster` through COMMANDS_GROUP).

Contract: results on stdout; on bad input exit 2 with every error on stderr and
nothing on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import entry_points

import yaml

EXIT_BAD_INPUT = 2
#: Where other distributions add `gpuhub` commands: each entry point is a callable given the subparsers
#: (the development checkout adds `gpuhub dev` and `gpuhub cluster` this way, so the CLI never imports them).
COMMANDS_GROUP = "gpuhub.commands"


class CLIError(Exception):
    """Bad input: printed on stderr, exit 2."""


def _load(path: str):
    from jupyterhub_gpu.model.profiles_file import load_profiles

    return load_profiles(path)


def cmd_validate(args) -> int:
    from jupyterhub_gpu.model.activity import idle_timeout_problems
    from jupyterhub_gpu.model.validation import ProfilesError

    cfg = _load(args.file)
    if problems := idle_timeout_problems(cfg, args.activity_interval):
        raise ProfilesError(problems, args.file)
    gpu_pools = sum(p.is_gpu for p in cfg.pools.values())
    print(f"ok: {args.file}: {len(cfg.pools)} pools ({gpu_pools} GPU), {len(cfg.profiles)} profiles, "
          f"{len(cfg.teams)} teams")
    from jupyterhub_gpu.model.fit import fit_warnings

    for warning in fit_warnings(cfg):  # valid, but worth knowing: stderr, exit 0
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _namespace(value: str) -> str:
    """An argparse type: a Kubernetes namespace name (a DNS label), refused as a usage error otherwise."""
    import re

    from jupyterhub_gpu.model.profiles import DNS_LABEL

    if not re.fullmatch(DNS_LABEL, value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a namespace name (lowercase letters, digits, '-')")
    return value


def _choose_profile(cfg, args, gpu: bool = False):
    """--profile, if --user with these --group's may use it (the hub's and gpu-jobs' own rule)."""
    from jupyterhub_gpu.model.choices import ChoiceError, choose_profile

    try:
        return choose_profile(cfg, args.user, args.group, args.profile, gpu=gpu, required=True)
    except ChoiceError as e:
        raise CLIError(f"{args.file}: {e}") from None


def cmd_render_pod(args) -> int:
    from jupyterhub_gpu.hub.render_pod import render_pod

    _choose_profile(_load(args.file), args)
    try:
        pod = render_pod(args.file, args.profile, args.user, args.group, args.hub_namespace)
    except ValueError as e:
        raise CLIError(str(e)) from None
    print(json.dumps(pod, indent=2))
    return 0


def cmd_render_kueue(args) -> int:
    from jupyterhub_gpu.builders.kueue import render_kueue

    print(yaml.safe_dump_all(render_kueue(_load(args.file), args.hub_namespace), sort_keys=False), end="")
    return 0


def cmd_render_kueue_config(args) -> int:
    from jupyterhub_gpu.builders.dra import kueue_configuration_fragment

    print("# merge into Kueue's Configuration (config.kueue.x-k8s.io/v1beta2; Helm: "
          "managerConfig.controllerManagerConfigYaml), then restart kueue-controller-manager")
    print(yaml.safe_dump(kueue_configuration_fragment(_load(args.file)), sort_keys=False), end="")
    return 0


def cmd_render_deploy(args) -> int:
    from jupyterhub_gpu.tools.render_deploy import write

    return write(args)  # the same as python -m jupyterhub_gpu.tools.render_deploy


def cmd_render_terraform(args) -> int:
    from jupyterhub_gpu.builders.terraform import TerraformError, render_terraform

    try:
        text = render_terraform(_load(args.file), args.file)
    except TerraformError as e:
        raise CLIError(f"{args.file}: {e}") from None
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise CLIError(f"cannot write {args.out}: {e}") from None
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def cmd_render_storage(args) -> int:
    from jupyterhub_gpu.builders.storage import StorageError, share_objects, share_source

    cfg = _load(args.file)
    try:
        source, options = share_source(args.nfs, args.azure_files)
    except StorageError as e:
        raise CLIError(str(e)) from None
    namespaces = [args.hub_namespace, *(t.namespace for t in cfg.teams.values())]
    print(yaml.safe_dump_all(share_objects(namespaces, source, args.size, mount_options=options), sort_keys=False),
          end="")
    return 0


def cmd_render_datasets(args) -> int:
    from jupyterhub_gpu.builders.datasets import dataset_objects

    print(yaml.safe_dump_all(dataset_objects(_load(args.file), args.hub_namespace), sort_keys=False), end="")
    return 0


def parse_params(items: list[str]) -> dict:
    """`--param k=v`: the rule `%gpu_submit` uses (jupyterhub_gpu.parameters): a Python literal, else the string."""
    from jupyterhub_gpu.parameters import parse_assignments

    try:
        return parse_assignments(items)
    except ValueError as e:
        raise CLIError(f"--param {e}") from None


def cmd_render_job(args) -> int:
    from functools import partial

    from jupyterhub_gpu.builders.jobs import JobRequestError, build_job
    from jupyterhub_gpu.builders.jobsets import build_jobset
    from jupyterhub_gpu.model.multinode import check_nodes
    from jupyterhub_gpu.model.profiles import duration_seconds
    from jupyterhub_gpu.services.jobs.limits import check_notebook_path

    cfg = _load(args.file)
    profile = _choose_profile(cfg, args, gpu=True)
    try:
        notebook = json.loads(open(args.notebook).read())
    except (OSError, ValueError) as e:
        raise CLIError(f"cannot read notebook {args.notebook!r}: {e}") from None
    # the local file is read from anywhere; the Job is told where it sits in the user's home (gpu-jobs' rule)
    home_path = args.notebook_path if args.notebook_path is not None else os.path.basename(args.notebook)
    try:
        home_path = check_notebook_path(home_path)
    except JobRequestError as e:
        raise CLIError(f"--notebook-path: {e}") from None
    timeout = None
    if args.timeout:
        try:
            timeout = duration_seconds(args.timeout)
        except ValueError as e:
            raise CLIError(f"--timeout: {e}") from None
    try:
        nodes = check_nodes(cfg, profile, cfg.team_for(args.group), args.nodes)
        build = partial(build_jobset, nodes=nodes) if nodes > 1 else build_job
        objs = build(cfg, profile, args.user, args.group, home_path, notebook,
                     parameters=parse_params(args.param), priority=args.priority,
                     timeout=int(timeout) if timeout else None)
    except (JobRequestError, ValueError) as e:
        raise CLIError(str(e)) from None
    print(yaml.safe_dump_all(objs, sort_keys=False), end="")
    return 0


def cmd_doctor(args) -> int:
    from jupyterhub_gpu.tools.doctor_cluster import DoctorError, run

    cfg = _load(args.file)
    if args.hub_service_account != "self" and "/" not in args.hub_service_account:
        raise CLIError(f"--hub-service-account {args.hub_service_account!r} must be NAMESPACE/NAME or self")
    try:
        code, table = run(cfg, args.file, args.kubeconfig, args.hub_service_account, args.hub_namespace,
                          rbac=not args.no_rbac)
    except FileNotFoundError as e:
        raise CLIError(str(e)) from None
    except DoctorError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(table)
    if code:
        print("doctor: some checks failed (✗); each says how to fix it", file=sys.stderr)
    return code


def cmd_report(args) -> int:
    from jupyterhub_gpu.tools.report import ReportError, run

    try:
        return run(args)
    except ReportError as e:
        raise CLIError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuhub", description="jupyterhub-gpu: GPU profiles, quota and jobs for "
                                                           "JupyterHub on Kubernetes.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = sub.add_parser("validate", help="check a profiles file; list every problem")
    v.add_argument("file")
    v.add_argument("--activity-interval", type=int, default=300, metavar="SECONDS",
                   help="JupyterHub's activity report interval the hub runs with (default 300, JupyterHub's); "
                        "a shorter idle_timeout is refused")
    v.set_defaults(run=cmd_validate)

    r = sub.add_parser("render", help="print the manifests a profiles file produces")
    rsub = r.add_subparsers(dest="what", required=True, metavar="WHAT")
    rp = rsub.add_parser("pod", help="the pod GPUSpawner would create, as JSON")
    rp.add_argument("file")
    rp.add_argument("--profile", required=True, help="profile slug")
    rp.add_argument("--user", required=True, help="JupyterHub user name")
    rp.add_argument("--group", action="append", default=[], help="a JupyterHub group of the user (repeatable)")
    rp.add_argument("--hub-namespace", default="jhub", type=_namespace,
                    help="where the hub runs servers, printed as the pod's namespace (default jhub)")
    rp.set_defaults(run=cmd_render_pod)
    rk = rsub.add_parser("kueue", help="ResourceFlavors, ClusterQueues, LocalQueues, priority classes (YAML)")
    rk.add_argument("file")
    rk.add_argument("--hub-namespace", default="jhub",
                    help="where servers run: their teams' LocalQueues go there (default jhub)")
    rk.set_defaults(run=cmd_render_kueue)
    rc = rsub.add_parser("kueue-config", help="what Kueue's own Configuration needs: the DRA DeviceClass mappings "
                                              "(quota names) and the pods-ready timeout (YAML)")
    rc.add_argument("file")
    rc.set_defaults(run=cmd_render_kueue_config)
    rd = rsub.add_parser("deploy", help="write the deploy files: RBAC, NetworkPolicies per team, the gpu-jobs "
                                        "Deployment, GPU operator values, device plugin and MIG configs, AKS pools")
    rd.add_argument("file")
    from jupyterhub_gpu.tools.render_deploy import add_arguments as deploy_arguments

    deploy_arguments(rd)
    rd.set_defaults(run=cmd_render_deploy)
    rt = rsub.add_parser("terraform", help="the AKS node pools as Terraform (azurerm_kubernetes_cluster_node_pool "
                                           "resources; the same pools as deploy/aks-nodepools.sh)")
    rt.add_argument("file")
    rt.add_argument("-o", "--out", metavar="OUT", help="write to this file (e.g. infra/gpu-nodepools.tf), "
                                                      "not stdout")
    rt.set_defaults(run=cmd_render_terraform)
    rs = rsub.add_parser("storage", help="the users' home share: a PersistentVolume and claim `gpuhub-home` for the "
                                         "hub namespace and each team namespace, all on one ReadWriteMany share")
    rs.add_argument("file")
    rs.add_argument("--nfs", metavar="SERVER:/EXPORT", help="an NFS export (e.g. Azure NetApp Files)")
    rs.add_argument("--azure-files", metavar="RG/ACCOUNT/SHARE", help="an Azure Files premium NFS share")
    rs.add_argument("--hub-namespace", default="jhub", help="where servers run (default jhub)")
    rs.add_argument("--size", default="1Ti", help="the claims' size (the share's quota is set on the share)")
    rs.set_defaults(run=cmd_render_storage)
    rds = rsub.add_parser("datasets", help="the read-only datasets of the file: a ReadOnlyMany PersistentVolume and "
                                           "claim `gpuhub-dataset-NAME` per namespace that mounts each")
    rds.add_argument("file")
    rds.add_argument("--hub-namespace", default="jhub", type=_namespace, help="where servers run (default jhub)")
    rds.set_defaults(run=cmd_render_datasets)
    rj = rsub.add_parser("job", help="the Job %%gpu_submit would create, with its ConfigMap (YAML); with --nodes N "
                         "the JobSet of a multi-node job")
    rj.add_argument("file")
    rj.add_argument("--profile", required=True)
    rj.add_argument("--user", required=True)
    rj.add_argument("--group", action="append", default=[])
    rj.add_argument("--notebook", required=True, metavar="FILE", help="the .ipynb to run, read from this path")
    rj.add_argument("--notebook-path", metavar="PATH", help="where the notebook is in the user's home, relative to "
                    "it: the output lands beside it (default: FILE's name, at the top of the home)")
    rj.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="a notebook parameter; VALUE is a Python literal (3, 0.1, True, [1, 2], 'text'), else "
                         "the text itself, as in %%gpu_submit")
    rj.add_argument("--priority")
    rj.add_argument("--timeout", help="e.g. 2h")
    rj.add_argument("--nodes", type=int, default=1, help="nodes for a multi-node job (the profile's max_nodes)")
    rj.set_defaults(run=cmd_render_job)

    d = sub.add_parser("doctor", help="check a live cluster against a profiles file")
    d.add_argument("file")
    d.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config, or in-cluster")
    d.add_argument("--hub-service-account", default="jhub/hub", metavar="NS/NAME",
                   help="whose permissions to check (default jhub/hub, z2jh's); `self`: the kubeconfig's user")
    d.add_argument("--hub-namespace", help="where server pods run (default: the service account's namespace)")
    d.add_argument("--no-rbac", action="store_true", help="skip the permission checks")
    d.set_defaults(run=cmd_doctor)

    rep = sub.add_parser("report", help="GPU showback: GPU-hours held and used, $, queue waits, evictions")
    from jupyterhub_gpu.tools.report import add_arguments as report_arguments

    report_arguments(rep)
    rep.set_defaults(run=cmd_report)

    for plugin in entry_points(group=COMMANDS_GROUP):
        _add_plugin_commands(plugin, sub)
    return p


def _add_plugin_commands(plugin, sub) -> None:
    """One `gpuhub.commands` entry point's commands. Declared but its module gone (the dev distribution's metadata
    left behind its folder): left out. Broken: said on stderr, and the product's own commands still work."""
    try:
        plugin.load()(sub)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != plugin.module.split(".")[0]:
            print(f"warning: gpuhub commands from {plugin.value} left out: {e}", file=sys.stderr)
    except Exception as e:  # a plugin's bug must not take validate, render or doctor with it
        print(f"warning: gpuhub commands from {plugin.value} left out: {type(e).__name__}: {e}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from jupyterhub_gpu.model.validation import ProfilesError

    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ProfilesError, CLIError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    # through the imported module, so that commands added by entry points raise the CLIError `main` catches
    from jupyterhub_gpu.tools import cli

    sys.exit(cli.main())
