//! `mesh bench tenants`: what a hostile tenant can do to another. One tenant (the victim) keeps asking
//! questions it has asked before (exact hits) and a few new ones (misses to the pod), alone and then
//! beside each attack of another tenant in turn: a flood of invalidations of random keys, a flood of
//! generations abandoned at once, a flood of punctuation-heavy questions, and a flood of connections
//! without a certificate to the core. The victim's hit ratio and latencies under each attack are set
//! against its run alone (the goal: within 10%).

pub mod attacks;
pub mod suite;
