//! Integration tests of kdoctor-agent against real peers on loopback: the agent's own echo
//! servers, nginx, unbound, and hand-written misbehaving servers.

mod echo;
mod support;
