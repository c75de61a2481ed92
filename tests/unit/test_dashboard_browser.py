"""The storage-only dashboard in a real browser: Debian's Chromium (``/usr/bin/chromium``, the Makefile's
host-packages install it), driven by Playwright's Python API on that system browser (no browser download), over
Optuna Dashboard serving the study kubetune.sdk.dashboard fills from an experiment stored on moto's S3 by the
runtime's own writers.

Checks what the user sees: every trial in the trial list with its state and name, each trial's intermediate values
(one per finite result, the values themselves), a learning curve for every trial that has a value, and the
importance view naming every searched parameter, the parallel coordinates with an axis per searched parameter;
and, with the page open, a result and a trial written to storage showing in it within 5 s, and the trials' final
states once the experiment is quiet. A PBT exploit: its trial's ``pbt_exploits`` among its attributes, its curve
going on from the donor's iteration. Several objectives: the Pareto front marks the non-dominated trials. The
experiment list (no name): each Experiment by name on the home page, and how it stands on its study's page; with
the cluster's reads (a fake cluster reader, through kubetune.sdk.cluster_notes), the study's note shows the
Experiment's conditions as a table and its Events, the trial table the Trials' phase and attempt, and a trial's
note the last lines of its pod's log. A missing browser fails the test: it is never skipped.

Screenshots go to ``$KUBETUNE_SCREENSHOTS``, default ``build/screenshots`` in the repository (printed); the views
README.md and docs/sdk.md show (:data:`DOCS_IMAGES`, most cropped to their view's card) are copied from there to
docs/images/ by hand after a run.
"""

from __future__ import annotations

import datetime
import os
import re
import time
from pathlib import Path

import pytest
from conftest_storage import aws_env, moto_endpoint, new_bucket  # noqa: F401 - fixtures
from playwright.sync_api import expect, sync_playwright
from stored_experiment import METRIC, SEARCHED, SPACE, TRIALS, exploit, store
from test_analysis import write_trial
from test_cluster_notes import CONDITIONS, FakeCluster, event, log_of, trial
from test_experiment_studies import digits, mnist, studies_of, write_mnist
from test_views import write_two

from kubetune.sdk.analysis import ExperimentAnalysis
from kubetune.sdk.cluster_notes import ClusterNotes
from kubetune.sdk.dashboard import Dashboard, ExperimentsDashboard
from kubetune.sdk.experiment_studies import ExperimentStudies
from kubetune.sdk.optuna_study import EXPLOITS_ATTR, TRIAL_NAME_ATTR
from kubetune.sdk.tuner import experiment_analysis

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
#: The screenshots docs/images/ holds (README.md and docs/sdk.md show them).
DOCS_IMAGES = (
    "learning-curves.png",
    "importance.png",
    "parallel-coordinates.png",
    "pbt-exploits.png",
    "pareto-front.png",
    "experiment-list.png",
    "experiment-conditions.png",
    "trial-log.png",
)
#: The browser window, in CSS pixels: small enough for the docs' pictures to stay small.
VIEWPORT = {"width": 1200, "height": 900}
#: How the dashboard names each Optuna state in the trial list.
SHOWN_STATE = {"COMPLETE": "Complete", "PRUNED": "Pruned", "FAIL": "Fail"}
#: How long a view may take to show, in milliseconds (the dashboard fetches the study, then renders with Plotly).
SHOW_MS = 30_000
expect.set_options(timeout=SHOW_MS)
#: How long a result written to storage may take to show in the open page, in milliseconds (issue 32).
LIVE_MS = 5_000


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, under Playwright."""
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install chromium (`make host-packages` installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield browser
        browser.close()


@pytest.fixture
def stored(tmp_path, aws_env, moto_endpoint):  # noqa: F811 - fixtures
    """The experiment stored on moto's S3, read: its analysis."""
    uri = store(f"s3://{new_bucket(moto_endpoint)}/kubetune", tmp_path, moto_endpoint)
    return ExperimentAnalysis(uri, METRIC, "max", storage_endpoint=moto_endpoint, param_space=SPACE)


@pytest.fixture
def dashboard(stored):
    """The dashboard of the stored experiment, serving on loopback, as it shows a quiet experiment (final states)."""
    with Dashboard(stored, settle_s=0) as served:
        yield served


@pytest.fixture
def shots():
    folder = Path(os.environ.get("KUBETUNE_SCREENSHOTS") or ROOT / "build" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"screenshots of the dashboard in {folder}")
    return folder


def test_every_trial_shows_with_its_intermediate_values(browser, dashboard, shots):
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{dashboard.url}/trials")
    expect(page.get_by_text(f"{len(TRIALS)} Trials", exact=True)).to_be_visible()
    for number, stored in enumerate(TRIALS):
        page.goto(f"{dashboard.url}/trials?numbers={number}")
        expect(page.get_by_text(f"Trial {number} (trial_id={number})", exact=True)).to_be_visible()
        values = page.locator("p", has_text=re.compile(r"^Intermediate Values$")).locator(
            "xpath=following-sibling::div[1]//p"
        )
        expect(values).to_have_count(len(stored.history))
        shown = [tuple(text.split()) for text in values.all_inner_texts()]
        assert [(int(step), float(value)) for step, value in shown] == stored.history, stored.name
        expect(page.get_by_text(f"{TRIAL_NAME_ATTR} {stored.name}", exact=False)).to_be_visible()
        listed = page.get_by_role("button", name=re.compile(rf"^Trial {number} {SHOWN_STATE[stored.state]}\b"))
        expect(listed).to_have_count(1)
        if number == 6:
            page.screenshot(path=shots / "failed-trial.png", full_page=True)


def test_the_study_page_draws_every_curve_and_names_every_searched_parameter(browser, dashboard, shots):
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(dashboard.url)
    importance = page.locator("#graph-hyperparameter-importances")
    for name in SEARCHED:
        expect(importance.locator(".ytick text", has_text=re.compile(rf"^{name}$"))).to_have_count(1)
    expect(importance.locator(".ytick text")).to_have_count(len(SEARCHED))
    curves = page.locator("#graph-intermediate-values .legendtext")
    with_curve = [f"trial #{n}" for n, t in enumerate(TRIALS) if t.state != "FAIL"]
    expect(curves).to_have_text(with_curve)
    page.screenshot(path=shots / "study.png", full_page=True)
    _card(page, "#graph-intermediate-values").screenshot(path=shots / "learning-curves.png")
    _card(page, "#graph-hyperparameter-importances").screenshot(path=shots / "importance.png")

    page.goto(f"{dashboard.url}/smartSelection")  # Optuna Dashboard draws its parallel coordinates there
    axes = page.locator("#plot-parallel-coordinate .axis-title")
    for name in (*SEARCHED, METRIC):
        expect(axes.filter(has_text=re.compile(rf"^{name}$"))).to_have_count(1)
    _card(page, "#plot-parallel-coordinate").screenshot(path=shots / "parallel-coordinates.png")


def _card(page, selector: str):
    """The card (Material UI's ``Card``) that holds the element ``selector``: one view, for a cropped screenshot."""
    return page.locator(selector).locator("xpath=ancestor::div[contains(@class, 'MuiCard-root')][1]")


def test_a_pbt_exploit_shows_in_the_trials_attributes_and_its_curve_goes_on_from_the_donors_iteration(
    browser,
    stored,
    tmp_path,
    moto_endpoint,  # noqa: F811 - fixtures
    shots,
):
    """Trial 1 exploited at its iteration 6 from trial 0's checkpoint of 4: its user attribute ``pbt_exploits`` says
    so in the trial list, and its intermediate values go on from 4 with its new lineage's."""
    donor, trial = TRIALS[0], TRIALS[1]
    path = stored.experiment_path
    exploit(path, trial.name, donor.name, 6, 4, [0.91, 0.92], {**trial.config, "lr": 0.012}, tmp_path, moto_endpoint)
    with Dashboard(stored.reread(), settle_s=0) as served:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{served.url}/trials?numbers=1")
        expect(page.get_by_text(f"{EXPLOITS_ATTR} at 6 from {donor.name}@4", exact=False)).to_be_visible()
        values = page.locator("p", has_text=re.compile(r"^Intermediate Values$")).locator(
            "xpath=following-sibling::div[1]//p"
        )
        expect(values).to_have_count(6)
        shown = [tuple(text.split()) for text in values.all_inner_texts()]
        assert [(int(step), float(value)) for step, value in shown] == [*trial.history[:4], (5, 0.91), (6, 0.92)]
        page.screenshot(path=shots / "pbt-exploits.png")


def test_the_pareto_front_of_several_objectives_marks_the_non_dominated_trials(
    browser,
    tmp_path,
    aws_env,  # noqa: F811 - fixtures
    moto_endpoint,  # noqa: F811 - fixtures
    shots,
):
    """``acc`` (max) and ``latency`` (min): Optuna Dashboard's Pareto front draws the completed trials, its trace
    of best trials the three no other dominates (test_views.TWO says which)."""
    uri = write_two(f"s3://{new_bucket(moto_endpoint)}/kubetune", tmp_path, moto_endpoint)
    analysis = ExperimentAnalysis(uri, ["acc", "latency"], ["max", "min"], storage_endpoint=moto_endpoint)
    with Dashboard(analysis, settle_s=0) as served:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(served.url)
        front = page.locator("#graph-pareto-front")
        expect(front.locator(".scatterlayer .point")).to_have_count(5)  # every trial with values
        traces = front.evaluate(
            "el => el.data.map(t => ({colorbar: t.marker.colorbar ? t.marker.colorbar.title.text : null,"
            " numbers: (t.text || []).map(s => JSON.parse(s.replace(/<br>/g, '')).number)}))"
        )
        by_colorbar = {t["colorbar"]: sorted(t["numbers"]) for t in traces if t["numbers"]}
        # the non-dominated completed trials in red ("Best Trial"), the dominated one in blue, the stopped-early
        # (PRUNED, values but not completed) and the failed one hollow
        assert by_colorbar == {"Best Trial": [0, 1, 3], "Trial": [2], None: [4, 5]}, traces
        _card(page, "#graph-pareto-front").screenshot(path=shots / "pareto-front.png")


def test_a_result_and_a_trial_written_to_storage_show_in_the_open_page_within_5_s(
    browser,
    stored,
    tmp_path,
    moto_endpoint,  # noqa: F811 - fixtures
    shots,
):
    """The experiment runs (it never goes quiet on its own here): trial 2 reports its third result and a ninth trial
    its first while the trial list is open on trial 2; both show within 5 s, the earlier points once each. Then the
    experiment goes quiet and the trials show their final states."""
    with Dashboard(stored, settle_s=3600) as served:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{served.url}/trials?numbers=2")
        values = page.locator("p", has_text=re.compile(r"^Intermediate Values$")).locator(
            "xpath=following-sibling::div[1]//p"
        )
        expect(values).to_have_count(2)
        expect(page.get_by_role("button", name=re.compile(r"^Trial 2 Running\b"))).to_have_count(1)
        running = TRIALS[2]
        longer = [*running.values, 0.5]
        new = {"lr": 0.001, "layers": 2, "act": "relu", "epochs": 6}
        write_trial(
            stored.experiment_path,
            running.name,
            [{METRIC: v} for v in longer],
            config=running.config,
            endpoint=moto_endpoint,
            workdir=tmp_path / "again",
        )
        write_trial(
            stored.experiment_path,
            "digits-00008",
            [{METRIC: 0.25}],
            config=new,
            endpoint=moto_endpoint,
            workdir=tmp_path,
        )
        written = time.monotonic()
        expect(page.get_by_text(f"{len(TRIALS) + 1} Trials", exact=True)).to_be_visible(timeout=LIVE_MS)
        expect(values).to_have_count(3, timeout=LIVE_MS)
        print(f"a result written to storage showed in the page {time.monotonic() - written:.1f} s later")
        shown = [tuple(text.split()) for text in values.all_inner_texts()]
        assert [(int(step), float(value)) for step, value in shown] == list(enumerate(longer, 1))
        expect(page.get_by_role("button", name=re.compile(r"^Trial 8 Running\b"))).to_have_count(1)
        page.screenshot(path=shots / "live.png", full_page=True)

        served.live.settle_s = 0  # quiet from now on: the trials end
        for number, state in ((2, "Pruned"), (8, "Pruned"), (0, "Complete"), (6, "Fail")):
            listed = page.get_by_role("button", name=re.compile(rf"^Trial {number} {state}\b"))
            expect(listed).to_have_count(1, timeout=LIVE_MS)


def test_the_experiment_list_names_each_experiment_and_its_page_says_how_it_stands(browser, tmp_path, shots):
    """``kubetune dashboard`` with no name: Optuna Dashboard's home page lists one study per Experiment by
    ``<namespace>/<name>``, and a study's page shows the Experiment's phase, trials by phase, best value and age."""
    root = f"file://{tmp_path}/store"
    store(root, tmp_path)
    write_mnist(root, tmp_path, [0.3, 0.4])
    listed = [
        digits(root, counts={"running": 2, "succeeded": 5, "failed": 1}, best=("digits-00003", 0.93)),
        mnist(root),
    ]
    with ExperimentsDashboard(studies_of(listed), refresh_s=0.5) as served:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(served.url)
        expect(page.get_by_text(re.compile(r"^\d+\. team/digits$"))).to_be_visible()
        expect(page.get_by_text(re.compile(r"^\d+\. other/mnist$"))).to_be_visible()
        page.screenshot(path=shots / "experiment-list.png")
        page.get_by_text(re.compile(r"^\d+\. team/digits$")).click()
        expect(page.get_by_text("Study User Attributes", exact=True)).to_be_visible()
        for key, value in (
            ("phase", "Running"),
            ("trials", "2 running, 5 succeeded, 1 failed"),
            ("best_value", "0.93"),
        ):
            row = page.get_by_role("row").filter(has=page.get_by_role("cell", name=key, exact=True))
            expect(row.filter(has=page.get_by_role("cell", name=value, exact=True))).to_have_count(1)
        page.screenshot(path=shots / "experiment-study.png", full_page=True)
        page.goto(f"{page.url}/note")
        expect(page.get_by_text(f"best {METRIC}: 0.93 (digits-00003)", exact=False)).to_be_visible()
        page.screenshot(path=shots / "experiment-note.png", full_page=True)


def test_the_notes_show_the_experiments_conditions_and_events_and_a_trials_log(browser, tmp_path, shots):
    """The experiment list with the cluster's reads (a fake reader: the Trials, Events and pod logs the API would
    answer): the study's Note tab shows the Experiment's conditions as a table and its Events; the trial table has
    each Trial's phase and attempt as columns; a trial's page shows its note, its status and its pod's last 50 log
    lines."""
    root = f"file://{tmp_path}/store"
    store(root, tmp_path)
    experiment = digits(root, counts={"pending": 1, "running": 7, "failed": 1})
    now = datetime.datetime.now(datetime.timezone.utc)
    at = {"lastTransitionTime": (now - datetime.timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    experiment["status"]["conditions"] = [{**condition, **at} for condition in CONDITIONS]
    cluster = FakeCluster()
    cluster.trials["team"] = [trial(i, "Running", reason="Running", attempt=1) for i in range(len(TRIALS))]
    waiting = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu"
    cluster.trials["team"].append(trial(len(TRIALS), "Pending", reason="Unschedulable", message=waiting))
    seen = (now - datetime.timedelta(seconds=40)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.events["team"] = [
        event("Trial", TRIALS[2].name, "TrialWaiting", f"pod {TRIALS[2].name}-1: ErrImagePull", seen, "Warning")
    ]
    pod = f"{TRIALS[2].name}-1"
    cluster.logs[pod] = log_of(pod)
    studies = ExperimentStudies(
        lambda: [experiment],
        lambda e, previous, listed: experiment_analysis(e, [], previous, listed),
        settle_s=3600,
        notes=ClusterNotes(cluster, max_logs=len(TRIALS)),
    )
    with ExperimentsDashboard(studies, refresh_s=0.5) as served:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(served.url)
        page.get_by_text(re.compile(r"^\d+\. team/digits$")).click()
        expect(page.get_by_text("Study User Attributes", exact=True)).to_be_visible()
        page.goto(f"{page.url}/note")
        conditions = page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Last transition"))
        expect(conditions).to_have_count(1)
        for type_, status, reason in (("Ready", "True", "SpecValid"), ("TrialsWaiting", "True", "Unschedulable")):
            row = conditions.get_by_role("row").filter(has=page.get_by_role("cell", name=type_, exact=True))
            expect(row.get_by_role("cell", name=status, exact=True)).to_have_count(1)
            expect(row.get_by_role("cell", name=reason, exact=True)).to_have_count(1)
        expect(conditions.get_by_role("cell", name="1 trial waits: 0/3 nodes | Insufficient cpu")).to_have_count(1)
        waiting_trials = page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Attempt"))
        expect(waiting_trials.get_by_role("cell", name=waiting, exact=True)).to_have_count(1)
        events = page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Object"))
        expect(events.get_by_role("cell", name=f"trial/{TRIALS[2].name}", exact=True)).to_have_count(1)
        expect(events.get_by_role("cell", name="TrialWaiting", exact=True)).to_have_count(1)
        page.screenshot(path=shots / "experiment-note-cluster.png", full_page=True)
        _card(page, "table").screenshot(path=shots / "experiment-conditions.png")

        study_url = page.url.removesuffix("/note")
        page.goto(f"{study_url}/smartSelection")  # Optuna Dashboard's trial table is there
        headers = page.locator("th")
        for column in ("phase", "reason", "pending_cause", "attempt", f"best_{METRIC}"):
            # a sortable (numeric) column's header ends with its sort icon's label, "sorted ascending"
            expect(headers.filter(has_text=re.compile(rf"^UserAttribute\s*{column}\s*(sorted \w+)?$"))).to_have_count(1)
        columns = [" ".join(text.splitlines()[0].split()) for text in headers.all_inner_texts()]
        row = page.locator("tr").filter(has=page.get_by_role("cell", name=TRIALS[2].name, exact=True))
        cells = [" ".join(text.split()) for text in row.locator("td").all_inner_texts()]
        shown = dict(zip(columns, cells))
        assert (shown["UserAttribute phase"], shown["UserAttribute attempt"]) == ("Running", "1"), shown
        page.screenshot(path=shots / "trial-table.png", full_page=True)

        page.goto(f"{study_url}/trials?numbers=2")
        expect(page.get_by_text(f"Trial `{TRIALS[2].name}`: ", exact=False)).to_have_count(0)  # Markdown, rendered
        heading = f"Last 50 lines of the log of pod {pod} (container trial)"
        expect(page.get_by_text(heading, exact=False)).to_be_visible()
        log_block = page.locator("code", has_text=f"{pod} step 79")
        expect(log_block).to_have_count(1)
        shown = log_block.inner_text().splitlines()
        assert shown == [f"{pod} step {i}" for i in range(30, 80)], shown[:3]
        page.screenshot(path=shots / "trial-note.png", full_page=True)
        page.set_viewport_size({"width": VIEWPORT["width"], "height": 1700})  # the whole card on the screen
        _card(page, f"code:has-text('{pod} step 79')").screenshot(path=shots / "trial-log.png")
