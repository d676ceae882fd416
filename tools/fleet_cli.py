"""`parley fleet plan`: a fleet spec's SGLang commands and Kubernetes manifests (docs/fleet.md).

The output is one YAML stream: each pool's commands as comments, then every
manifest, so ``parley fleet plan | kubectl apply -f -`` applies what was read.
``--commands-only`` prints just the commands, as shell; ``--out`` writes the
kustomize directory instead of the manifests.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer
import yaml

from parley.errors import ConfigError
from tools.fleet import sglang
from tools.fleet.spec import EXAMPLE, FleetSpec, PoolSpec, load

app = typer.Typer(help="The GPU fleet: SGLang pools and their Kubernetes manifests.", no_args_is_help=True)


@app.callback()
def fleet() -> None:
    """A group even with one command: `parley fleet plan`, never `parley fleet`."""


@app.command("plan")
def plan(
    spec_path: Path = typer.Option(None, "--spec", help=f"Fleet spec (default: {EXAMPLE.relative_to(EXAMPLE.parents[2])})"),
    out: Path = typer.Option(None, "--out", help="Write the manifests as a kustomize directory here"),
    commands_only: bool = typer.Option(False, "--commands-only", help="Only the SGLang commands, as a shell script"),
    pool: str = typer.Option(None, "--pool", help="Only this pool's commands (with --commands-only)"),
) -> None:
    """Print each pool's SGLang commands, then the manifests that run them."""
    try:
        spec = load(spec_path)
    except ConfigError as exc:
        _fail(str(exc))
    if pool is not None and not commands_only:
        _fail("--pool picks commands: give --commands-only too (the manifests are the whole fleet's)")
    pools = [p for p in spec.pools if pool in (None, p.name)]
    if not pools:
        _fail(f"no pool {pool!r} in the spec; it has {', '.join(p.name for p in spec.pools)}")
    for comment, line in commands(spec, pools):
        if commands_only:
            typer.echo(line)
        else:  # before the manifests every line stays a YAML comment, blank ones too
            typer.echo(line if comment and line else f"# {line}".rstrip())
    if commands_only:
        return
    docs = _render(spec)
    if out is not None:
        from tools.fleet.kubernetes import write

        paths = write(docs, out)
        typer.echo(f"# wrote {len(paths)} files to {out}")
        return
    typer.echo("---")
    typer.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


def commands(spec: FleetSpec, pools: list[PoolSpec]) -> list[tuple[bool, str]]:
    """The pools' launches as (is a comment, line): a shell script, a header comment per launch."""
    lines = [(True, f"# fleet {spec.name}: SGLang {spec.sglang_release} ({spec.images.sglang}), namespace {spec.namespace}")]
    for pool in pools:
        for launch in sglang.launches(pool, namespace=spec.namespace):
            lines += [(True, ""), (True, f"# pool {pool.name} · {launch.role} · {_shape(pool, launch)}")]
            lines += [(False, line) for line in _wrapped(launch.argv)]
    if any(e.nodes_per_replica > 1 for p in pools for e in p.engines):
        lines += [
            (True, ""),
            (True, f"# {sglang.NODE_RANK} and {sglang.LEADER_ADDRESS} are set by Kubernetes in a LeaderWorkerSet;"),
            (True, "# on other hosts write the node's rank (0 on the leader) and the leader's address."),
        ]
    return lines


def _shape(pool: PoolSpec, launch: sglang.Launch) -> str:
    if launch.role == "router":
        assert pool.disaggregation is not None
        return f"{pool.disaggregation.router.replicas} replicas, no GPU, port {launch.port}"
    phase = next(e for e in pool.engines if e.role == launch.role)
    r = phase.replicas
    replicas = f"{r.min} replicas" if r.min == r.max else f"{r.min}-{r.max} replicas"
    return (
        f"{replicas} × {launch.nodes} node{'s' if launch.nodes > 1 else ''} × {launch.gpus_per_node} {pool.gpu.type},"
        f" port {launch.port}"
    )


def _wrapped(argv: tuple[str, ...]) -> list[str]:
    """One flag and its values per line, continued with backslashes, as a person would write it."""
    groups = [list(argv[:3])]  # python3 -m <module>
    for word in argv[3:]:
        if word.startswith("--"):
            groups.append([word])
        else:
            groups[-1].append(word)
    # $(…) left bare: Kubernetes fills it, and a reader should see it is not a literal.
    rendered = [" ".join(w if w.startswith("$(") else shlex.quote(w) for w in g) for g in groups]
    last = len(rendered) - 1
    return [("  " if i else "") + line + (" \\" if i < last else "") for i, line in enumerate(rendered)]


def _render(spec: FleetSpec) -> list[dict]:
    from tools.fleet.kubernetes import render

    try:
        return render(spec)
    except ConfigError as exc:
        _fail(str(exc))
        raise  # unreachable: _fail exits


def _fail(message: str) -> None:
    typer.echo(f"parley fleet: {message}", err=True)
    raise typer.Exit(1)


if __name__ == "__main__":
    sys.exit(app())
