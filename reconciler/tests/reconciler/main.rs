//! The kdoctor-reconciler test suite (one binary): the pure round state machine, and the
//! controller end to end in a simulated cluster with stand-in agents.

mod carriers;
mod export;
mod flow;
mod invalid;
mod markers;
mod plan;
mod real_agents;
mod replication;
mod robustness;
mod rounds;
mod scale;
mod support;
