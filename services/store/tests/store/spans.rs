//! Every store operation runs in one span, `store.<operation>`, that names the backend and nothing of
//! the data: no message body, state or value reaches a span or an event, the driver's included.

use std::sync::{Arc, Mutex, OnceLock};

use parley_store::testing::{fresh_postgres_url, fresh_sqlite_url};
use parley_store::{Direction, NewConversation, Store, StoreOptions, connect};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::subscriber::NoSubscriber;
use tracing::{Dispatch, Event, Subscriber};
use tracing_subscriber::Registry;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};

/// A marker the operations write; it must appear in no span and no event.
const SECRET: &str = "the-body-that-stays-private";

#[derive(Debug, Default, Clone)]
struct Recorded {
    /// `(span name, its fields as name=value)`, in creation order.
    spans: Vec<(String, Vec<String>)>,
    /// Every field of every event, as name=value.
    event_fields: Vec<String>,
}

#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<Recorded>>);

struct Fields(Vec<String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let mut fields = Fields(Vec::new());
        attrs.record(&mut fields);
        let mut recorded = self.0.lock().expect("not poisoned");
        recorded
            .spans
            .push((attrs.metadata().name().to_owned(), fields.0));
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        let mut recorded = self.0.lock().expect("not poisoned");
        recorded.event_fields.extend(fields.0);
    }
}

/// Registers a second tracing `Dispatch`, alive as long as the process, before a test installs
/// its capturing subscriber. While exactly one dispatch is registered, tracing-core asks only the
/// default subscriber of whichever thread first reaches a callsite (tokio-rs/tracing#3611): a
/// test of this binary without a subscriber would switch that span or event off for the
/// capturing test too. With two registered, every registered one is asked.
fn keep_a_second_dispatch() {
    static SECOND: OnceLock<Dispatch> = OnceLock::new();
    SECOND.get_or_init(|| Dispatch::new(NoSubscriber::default()));
}

async fn operations(store: &dyn Store) {
    let id = "conversation-1";
    store
        .create_conversation(NewConversation {
            id: id.into(),
            peer: Some("peer".into()),
            state: json!({ "note": SECRET }),
        })
        .await
        .expect("create");
    store
        .append_message(id, Direction::Inbound, &json!({ "content": SECRET }))
        .await
        .expect("append");
    store
        .update_conversation_state(id, 0, &json!({ "note": SECRET }))
        .await
        .expect("update");
    let stale = store
        .update_conversation_state(id, 0, &json!({ "note": SECRET }))
        .await;
    assert!(stale.is_err(), "a stale version is refused");
    store.get_conversation(id).await.expect("get");
}

/// Runs [`operations`] under a recording subscriber and checks what was emitted.
async fn spans_name_the_operation_and_the_backend_only(url: &str, backend: &str) {
    let recorder = Recorder::default();
    let subscriber = Registry::default().with(recorder.clone());
    keep_a_second_dispatch();
    let _guard = tracing::subscriber::set_default(subscriber);

    let store = connect(url, StoreOptions::default())
        .await
        .expect("connect");
    operations(store.as_ref()).await;

    let recorded = recorder.0.lock().expect("not poisoned").clone();
    let names: Vec<&str> = recorded
        .spans
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| name.starts_with("store."))
        .collect();
    assert_eq!(
        names,
        [
            "store.connect",
            "store.create_conversation",
            "store.append_message",
            "store.update_conversation_state",
            "store.update_conversation_state",
            "store.get_conversation",
        ]
    );
    for (name, fields) in recorded
        .spans
        .iter()
        .filter(|(name, _)| name.starts_with("store."))
    {
        assert_eq!(fields, &[format!("backend={backend:?}")], "{name}");
    }
    let everything = format!("{recorded:?}");
    assert!(!everything.contains(SECRET), "{everything}");
}

#[tokio::test]
async fn store_spans_on_sqlite() {
    let (url, _dir) = fresh_sqlite_url();
    spans_name_the_operation_and_the_backend_only(&url, "sqlite").await;
}

#[tokio::test]
async fn store_spans_on_postgres() {
    let (url, database) = fresh_postgres_url().await;
    spans_name_the_operation_and_the_backend_only(&url, "postgres").await;
    database
        .drop_database()
        .await
        .expect("the test database can be dropped");
}
