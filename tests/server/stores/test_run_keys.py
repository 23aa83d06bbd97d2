"""The keys as logged, kept with the run's files (issue 37): read back by a server started again,
bounded per run and in all (the run changed longest ago leaves first, its file with it), and
booked against the hub's memory like the marks (keys that do not fit are counted, not kept)."""

from verl_rl_insight.server.stores.run_keys import RunKeys, file_name

KEYS = {"rl_insight_monitor_val_aux_num_turns_max": "val-aux/num_turns/max"}


def test_a_server_started_again_reads_back_each_runs_keys_as_logged(tmp_path):
    RunKeys(tmp_path / "run-keys").add(("p", "a"), KEYS)
    assert RunKeys(tmp_path / "run-keys").get(("p", "a")) == KEYS
    assert (tmp_path / "run-keys" / file_name(("p", "a"))).stat().st_mode & 0o777 == 0o600


def test_keys_beyond_a_runs_bound_are_counted_and_the_oldest_run_leaves_over_the_total(tmp_path):
    kept = RunKeys(tmp_path / "run-keys", max_per_run=2, max_total_bytes=2000)
    kept.add(("p", "a"), {f"rl_insight_monitor_k{i}": f"k/{i}" for i in range(3)})
    assert len(kept.get(("p", "a"))) == 2 and kept.stats["refused_keys"] == 1
    kept.add(("p", "b"), {f"rl_insight_monitor_k{i}": f"k/{i}" for i in range(2)})
    kept.add(("p", "c"), {f"rl_insight_monitor_k{i}": f"k/{i}" for i in range(2)})
    assert kept.get(("p", "a")) == {} and not (tmp_path / "run-keys" / file_name(("p", "a"))).exists()
    assert kept.get(("p", "c")) and kept.stats["bytes"] <= 2000


def test_what_is_held_is_booked_and_keys_that_do_not_fit_are_not_kept():
    booked = []
    kept = RunKeys()
    kept.book_all(lambda nbytes: booked.append(nbytes) or sum(booked) < 1000)
    kept.add(("p", "a"), KEYS)
    assert kept.get(("p", "a")) == KEYS and sum(booked) > 0
    kept.add(("p", "b"), {f"rl_insight_monitor_k{i}": f"k/{i}" * 50 for i in range(20)})
    assert kept.get(("p", "b")) == {} and kept.stats["refused_keys"] == 20
    kept.forget(("p", "a"))
    assert kept.get(("p", "a")) == {} and sum(b for b in booked if b < 0) < 0
