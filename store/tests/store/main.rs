//! The kdoctor-store test suite (one binary).

mod basics;
mod corruption;
mod crash;
mod feed;
mod full_disk;
mod group_commit;
mod outbox;
mod props;
mod raft;
mod raft_crash;
mod retention;
mod support;
