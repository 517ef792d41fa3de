"""Test sessions, run inside the uv workspace environment (``./scripts/test`` syncs it).

    nox -s lint        ruff, and the import rules (import-linter)
    nox -s typecheck   mypy (strict on the protocol and the reducers)
    nox -s tests       unit + integration tests of every package
    nox -s unit        the unit tests alone (no Codey process started; two processes)
    nox -s e2e         Playwright over the real three-process stack (Debian's chromium)
    nox -s stress      unit + integration with four processes on two cores, then e2e twice:
                       races show here before CI ("./scripts/test --stress")
"""

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "tests", "e2e"]
nox.options.error_on_missing_interpreters = True

PACKAGES = ["packages/protocol", "packages/server", "packages/worker", "packages/testkit"]


@nox.session
def lint(session: nox.Session) -> None:
    session.run("ruff", "check", "packages", "e2e", "scripts", "noxfile.py", external=True)
    # the import rules in pyproject.toml ([tool.importlinter])
    session.run("lint-imports", external=True)


@nox.session
def typecheck(session: nox.Session) -> None:
    session.run(
        "mypy",
        "packages/protocol/src/codey_protocol",
        "packages/server/src/codey_server",
        "packages/worker/src/codey_worker",
        "packages/testkit/src/codey_testkit",
        external=True,
    )


@nox.session
def tests(session: nox.Session) -> None:
    args = session.posargs or [f"{p}/tests" for p in PACKAGES]
    # three processes (pytest-xdist) on two cores, a whole file to each: the integration tests
    # spend much of their time waiting on the processes they start (with two, the cores were
    # busy ~65 % of the time; three took 15 % less time), and a module's fixtures (one
    # PostgreSQL cluster per file) stay in one process
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadfile",
                "--durations=25", *args, external=True)


@nox.session
def unit(session: nox.Session) -> None:
    # not in the default sessions: ``tests`` runs these too
    args = session.posargs or [f"{p}/tests/unit" for p in PACKAGES]
    # two processes: the worker's unit tests run real commands, and wait on them
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *args, external=True)


@nox.session
def e2e(session: nox.Session) -> None:
    # three processes on two cores: each test builds its own stack (ports 0, its own homes)
    # and waits on it and on Chromium; with two, the cores were busy ~70 % of the time (99
    # tests, ~700 CPU-seconds in 510 s on CI's two cores). CI's 20 minutes are the bound
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--durations=25", "e2e",
                *session.posargs, external=True)


@nox.session
def stress(session: nox.Session) -> None:
    # not in the default sessions. More processes than cores: a test that races, or waits on
    # a guessed delay, fails here first. Then the e2e suite twice, as CI runs it (a flake that
    # shows once in two runs fails CI as surely).
    session.env["CODEY_STRESS"] = "1"  # and the long-running checks at their full length
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-n", "4", "--dist", "loadfile",
                "--durations=25", *[f"{p}/tests" for p in PACKAGES], external=True)
    for _ in range(2):
        session.run("pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--durations=25",
                    "e2e", external=True)
