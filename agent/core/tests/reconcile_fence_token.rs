//! Fencing tokens: every instance of an exclusive replica carries one; it grows whenever the
//! replica's ownership moves (a death, a handoff, a move back, an owner that lost its majority),
//! stays the same across restarts on one owner (a crash, an agent restart), respects the shell's
//! floor, and normal replicas get none.

mod reconcile_support;

use reconcile_support::*;
use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::Action;

const EXCLUSIVE: &str = "[placement]\nexclusive = true\n";

fn three_nodes_with_db() -> Cluster {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.put(spec("web", 3, ""), "v1");
    c.place("db", 0, "n1");
    for (r, n) in [(0, "n1"), (1, "n2"), (2, "n3")] {
        c.place("web", r, n);
    }
    c.run_for(5_000); // exclusive starts publish their claim for 3 s first
    assert_eq!(c.alive_copies("db", 0).len(), 1);
    c
}

/// The token of the one alive db instance on `node`, as its runtime lists it.
fn token_on(c: &Cluster, node: &str) -> u64 {
    let alive = c.agent(node).rt.alive(&ReplicaId::new("db", 0));
    assert_eq!(alive.len(), 1, "one db instance on {node}");
    alive[0]
        .fence_token
        .expect("an exclusive instance has a token")
}

/// The token `node` publishes for its db instance (what gossip and `shoal status` carry).
fn published_token(c: &Cluster, node: &str) -> Option<u64> {
    let observed = c.agent(node).rec.observed();
    let db = ReplicaId::new("db", 0);
    observed
        .iter()
        .find(|s| s.replica == db && s.handle.is_some() && s.may_be_alive())
        .and_then(|s| s.fence_token)
}

fn db_starts(c: &Cluster) -> usize {
    c.starts("db", 0).len()
}

#[test]
fn a_move_after_a_death_takes_a_larger_token() {
    let mut c = three_nodes_with_db();
    let first = token_on(&c, "n1");
    assert_eq!(published_token(&c, "n1"), Some(first));
    c.kill_host("n1");
    c.place("db", 0, "n2");
    c.run_for(40_000);
    let second = token_on(&c, "n2");
    assert!(
        second > first,
        "the new owner's token {second} must exceed the dead owner's {first}"
    );
    assert_eq!(published_token(&c, "n2"), Some(second));
}

#[test]
fn a_restart_on_the_same_owner_keeps_the_token() {
    let mut c = three_nodes_with_db();
    let first = token_on(&c, "n1");
    let handle = c.handle("n1", "db", 0);
    c.fence_token_floor = c.now; // the floor applies to new tokens only
    c.crash("n1", "db", 0, 1);
    c.run_for(15_000); // the first backoff is 10 s
    assert_eq!(db_starts(&c), 2, "restarted once");
    assert_ne!(c.handle("n1", "db", 0), handle, "a new instance");
    assert_eq!(token_on(&c, "n1"), first, "ownership did not move");
}

#[test]
fn a_restarted_agent_adopts_the_instance_with_its_token_and_keeps_it() {
    let mut c = three_nodes_with_db();
    let first = token_on(&c, "n1");
    c.restart_agent("n1");
    c.step();
    assert_eq!(
        published_token(&c, "n1"),
        Some(first),
        "adopted with its token"
    );
    assert_eq!(db_starts(&c), 1, "adopted, not started again");
    c.crash("n1", "db", 0, 1);
    c.run_for(15_000);
    assert_eq!(db_starts(&c), 2);
    assert_eq!(
        token_on(&c, "n1"),
        first,
        "the adopted token is this node's own"
    );
}

#[test]
fn a_handoff_and_a_move_back_each_take_a_larger_token() {
    let mut c = three_nodes_with_db();
    let first = token_on(&c, "n1");
    c.place("db", 0, "n2");
    c.run_for(10_000);
    let second = token_on(&c, "n2");
    assert!(second > first, "{second} > {first}");
    c.place("db", 0, "n1");
    c.run_for(10_000);
    let third = token_on(&c, "n1");
    assert!(
        third > second,
        "back on n1, its old token {first} is stale: {third} > {second}"
    );
}

#[test]
fn an_owner_that_lost_its_majority_takes_a_new_token() {
    let mut c = three_nodes_with_db();
    let first = token_on(&c, "n1");
    // Cut off long enough to fence itself (10 s), healed before the others may take over (23.5 s).
    c.partition(&["n1"], &["n2", "n3"]);
    c.run_for(12_000);
    assert!(c.alive_copies("db", 0).is_empty(), "n1 fenced itself");
    c.heal();
    c.run_for(10_000);
    assert_eq!(c.alive_copies("db", 0)[0].0, "n1");
    let second = token_on(&c, "n1");
    assert!(
        second > first,
        "ownership may have moved while n1 was cut off: {second} > {first}"
    );
}

#[test]
fn the_floor_bounds_new_tokens_even_when_the_mesh_forgot_the_old_ones() {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.fence_token_floor = T0;
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.place("db", 0, "n1");
    c.run_for(5_000);
    let first = token_on(&c, "n1");
    assert_eq!(first, T0, "the first token is the floor");

    // n1's host dies and the others forget what it published (the shell dropped its state).
    c.kill_host("n1");
    for agent in c.agents.values_mut() {
        agent.heard.remove("n1");
    }
    c.place("db", 0, "n2");
    let floor = c.now;
    c.fence_token_floor = floor;
    c.run_for(40_000);
    let second = token_on(&c, "n2");
    assert_eq!(second, floor, "nothing known above the floor: the floor");
    assert!(second > first);
}

#[test]
fn a_token_seen_while_waiting_is_remembered_after_the_gossip_is_gone() {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.place("db", 0, "n1");
    c.run_for(5_000);
    assert_eq!(token_on(&c, "n1"), 1);
    c.kill_host("n1");
    c.place("db", 0, "n2");
    c.step(); // n2 waits for the fencing delay and reads n1's last state
    for agent in c.agents.values_mut() {
        agent.heard.remove("n1");
    }
    c.run_for(40_000);
    assert_eq!(token_on(&c, "n2"), 2);
}

#[test]
fn without_a_floor_a_mesh_that_forgot_reissues_small_tokens() {
    // Why the agent passes its wall clock: the counter alone lives only in gossip.
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.place("db", 0, "n1");
    c.run_for(5_000);
    assert_eq!(token_on(&c, "n1"), 1);
    c.kill_host("n1");
    for agent in c.agents.values_mut() {
        agent.heard.remove("n1");
    }
    c.place("db", 0, "n2");
    c.run_for(40_000);
    assert_eq!(
        token_on(&c, "n2"),
        1,
        "the old owner's token is unknown here"
    );
}

#[test]
fn normal_replicas_get_no_token_and_starts_say_which_token() {
    let c = three_nodes_with_db();
    for agent in c.agents.values() {
        for i in agent.rt.instances.values() {
            let exclusive = i.replica.workload == "db";
            assert_eq!(i.fence_token.is_some(), exclusive, "{i:?}");
        }
    }
    let start = c
        .log
        .iter()
        .find(|(_, _, a)| a.replica().workload == "db" && matches!(a, Action::Start { .. }))
        .map(|(_, _, a)| a.to_string())
        .expect("db started");
    assert!(start.contains("with fencing token 1"), "{start}");
}
