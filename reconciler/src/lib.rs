//! kdoctor-reconciler: the controller's task reconcilers — validation against the cluster,
//! carriers (server-side applied), the round state machine, the status (written only here),
//! harvesting agent reports into the store, and clean-up.

pub mod rounds;
