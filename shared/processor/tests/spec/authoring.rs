//! Writing a processor (issue #9, section 5): a state needs no `Default`,
//! and event type names are written once — a contract that names a type its
//! event enum cannot decode is refused when the runner is built, instead of
//! drifting into one diagnostic per event.

use ds_processor::{
    Contract, ContractError, Envelope, InlineRunner, Processor, RunnerConfig, RunnerError, StreamIncarnation,
};
use ds_processor_testkit::harness::World;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", content = "payload")]
enum AccountEvent {
    #[serde(rename = "account/deposited")]
    Deposited { amount: u64 },
    #[serde(rename = "account/withdrawn")]
    Withdrawn { amount: u64 },
}

/// No `Default`: an account starts with an opening balance chosen by the
/// processor's owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Balance {
    cents: u64,
}

struct Account {
    contract: Contract,
    opening: u64,
}

impl Processor for Account {
    type State = Balance;
    type Event = AccountEvent;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> Balance {
        Balance { cents: self.opening }
    }

    fn reduce(&self, state: Balance, event: &Envelope<AccountEvent>) -> Balance {
        match event.event {
            AccountEvent::Deposited { amount } => Balance { cents: state.cents + amount },
            AccountEvent::Withdrawn { amount } => Balance { cents: state.cents.saturating_sub(amount) },
        }
    }
}

fn account(contract: Contract) -> Account {
    Account { contract, opening: 1_000 }
}

#[tokio::test(start_paused = true)]
async fn a_state_without_default_folds_from_the_processors_initial_state() {
    let world = World::new();
    world.journal.append_event("account/deposited", json!({ "amount": 250 }));
    world.journal.append_event("account/withdrawn", json!({ "amount": 50 }));
    let contract = Contract::for_events::<AccountEvent>("account", "1").unwrap();
    let runner = world.open(account(contract.clone()), RunnerConfig::default()).await.unwrap();
    runner.catch_up().await.unwrap();
    assert_eq!(runner.snapshot().state, Balance { cents: 1_200 });

    // A rewind folds from the same initial state.
    runner.reprocess_from(2, 0, "check").await.unwrap();
    assert_eq!(runner.snapshot().state, Balance { cents: 1_250 });
}

#[test]
fn contract_for_events_names_exactly_the_enums_types() {
    let contract = Contract::for_events::<AccountEvent>("account", "1").unwrap();
    assert_eq!(contract.consumes, ["account/deposited", "account/withdrawn"]);
}

#[tokio::test(start_paused = true)]
async fn a_consumed_type_the_event_enum_cannot_decode_is_refused_at_open_not_diagnosed_per_event() {
    let world = World::new();
    world.journal.append_event("account/deposited", json!({ "amount": 250 }));
    // "account/withdrew" drifted from the enum's "account/withdrawn".
    let drifted = Contract::new("account", "1", ["account/deposited", "account/withdrew"]);

    let error = world.open(account(drifted.clone()), RunnerConfig::default()).await.err().unwrap();

    match &error {
        RunnerError::Contract(ContractError::UnknownConsumedType { slug, event_type, known }) => {
            assert_eq!((slug.as_str(), event_type.as_str()), ("account", "account/withdrew"));
            assert!(known.contains(&"account/withdrawn".to_owned()));
        }
        other => panic!("expected a contract error, got {other:?}"),
    }
    assert!(error.to_string().contains("account/withdrew"), "{error}");
    assert!(world.journal.events_of_type("stream/processor-diagnostic").is_empty());
    assert!(world.progress.record().is_none(), "nothing ran");

    let inline = InlineRunner::new(account(drifted), StreamIncarnation::new("i"));
    assert!(matches!(inline.err(), Some(ContractError::UnknownConsumedType { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_wildcard_over_a_closed_event_enum_is_refused() {
    let world = World::new();
    let error = world.open(account(Contract::new("account", "1", ["*"])), RunnerConfig::default()).await.err();
    assert!(matches!(error, Some(RunnerError::Contract(ContractError::WildcardWithClosedEvents { .. }))));
}

#[tokio::test(start_paused = true)]
async fn a_subset_of_the_enum_is_a_valid_contract() {
    let world = World::new();
    world.journal.append_event("account/deposited", json!({ "amount": 250 }));
    world.journal.append_event("account/withdrawn", json!({ "amount": 50 }));
    let runner = world
        .open(account(Contract::new("account", "1", ["account/deposited"])), RunnerConfig::default())
        .await
        .unwrap();
    runner.catch_up().await.unwrap();
    assert_eq!(runner.snapshot().state, Balance { cents: 1_250 }, "withdrawals are not consumed");
}
