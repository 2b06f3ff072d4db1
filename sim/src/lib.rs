//! kube-sim: the kubelet of kdoctor's test clusters, whose control plane is the real one.
//!
//! `hack/cluster.sh` runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! kube-proxy of Kubernetes v1.34.4 (built from their Go modules by hack/kube/build.sh) in a
//! network namespace of their own; kube-sim is the kubelet of the cluster's nodes
//! ([`kubelet`]: pods run as real processes in network and mount namespaces of their own, or
//! are simulated), forwards the API server to the host's loopback ([`netns::forward`]), and
//! gives tests a cluster of their own ([`testcluster`]). Never shipped.

#![warn(missing_docs)]

pub mod kubelet;
pub mod netns;
pub mod testcluster;
