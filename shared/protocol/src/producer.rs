//! The idempotent producer state machine (§5.2.1), as a pure decision.

use crate::headers::ProducerHeaders;

/// Stored state of one producer on one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub epoch: u64,
    pub last_seq: u64,
}

/// What to do with a producer request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// New data: append it and store `next` (200 OK).
    Accept { next: State },
    /// Already applied: succeed without writing (204), echo `last_seq`.
    Duplicate { epoch: u64, last_seq: u64 },
    /// Zombie fencing: 403 with the current epoch.
    StaleEpoch { current: u64 },
    /// A new epoch must start at seq 0: 400.
    NewEpochNonZeroSeq,
    /// Sequence gap: 409 with expected and received.
    Gap { expected: u64, received: u64 },
}

/// Decide a request against the producer's stored state (`None`: never seen).
pub fn decide(state: Option<State>, req: &ProducerHeaders) -> Decision {
    let Some(state) = state else {
        // A producer we have never seen starts its session at seq 0.
        return if req.seq == 0 {
            Decision::Accept { next: State { epoch: req.epoch, last_seq: 0 } }
        } else {
            Decision::Gap { expected: 0, received: req.seq }
        };
    };
    if req.epoch < state.epoch {
        return Decision::StaleEpoch { current: state.epoch };
    }
    if req.epoch > state.epoch {
        return if req.seq == 0 {
            Decision::Accept { next: State { epoch: req.epoch, last_seq: 0 } }
        } else {
            Decision::NewEpochNonZeroSeq
        };
    }
    if req.seq <= state.last_seq {
        Decision::Duplicate { epoch: state.epoch, last_seq: state.last_seq }
    } else if req.seq == state.last_seq + 1 {
        Decision::Accept { next: State { epoch: state.epoch, last_seq: req.seq } }
    } else {
        Decision::Gap { expected: state.last_seq + 1, received: req.seq }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(epoch: u64, seq: u64) -> ProducerHeaders {
        ProducerHeaders { id: "p".into(), epoch, seq }
    }

    #[test]
    fn table() {
        let s = Some(State { epoch: 1, last_seq: 5 });
        assert_eq!(decide(None, &req(0, 0)), Decision::Accept { next: State { epoch: 0, last_seq: 0 } });
        assert_eq!(decide(None, &req(0, 3)), Decision::Gap { expected: 0, received: 3 });
        assert_eq!(decide(s, &req(0, 9)), Decision::StaleEpoch { current: 1 });
        assert_eq!(decide(s, &req(2, 1)), Decision::NewEpochNonZeroSeq);
        assert_eq!(decide(s, &req(2, 0)), Decision::Accept { next: State { epoch: 2, last_seq: 0 } });
        assert_eq!(decide(s, &req(1, 3)), Decision::Duplicate { epoch: 1, last_seq: 5 });
        assert_eq!(decide(s, &req(1, 6)), Decision::Accept { next: State { epoch: 1, last_seq: 6 } });
        assert_eq!(decide(s, &req(1, 8)), Decision::Gap { expected: 6, received: 8 });
    }

    proptest! {
        /// Replaying any request sequence against the machine never accepts the
        /// same (epoch, seq) twice and never lets the epoch go backwards.
        #[test]
        fn exactly_once(reqs in proptest::collection::vec((0u64..3, 0u64..6), 0..60)) {
            let mut state = None;
            let mut accepted = std::collections::HashSet::new();
            for (epoch, seq) in reqs {
                if let Decision::Accept { next } = decide(state, &req(epoch, seq)) {
                    prop_assert!(accepted.insert((epoch, seq)));
                    if let Some(prev) = state { prop_assert!(next.epoch >= prev.epoch); }
                    state = Some(next);
                }
            }
        }
    }
}
