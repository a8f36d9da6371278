//! Golden webhook events (`tests/vectors/webhooks/<type>.json`, one per [`EventType`], as the
//! facilitator emits them): each reads as its typed data and writes back as the same JSON.

use std::{collections::BTreeSet, fs, path::PathBuf};

use serde_json::Value;
use tollgate_protocol::webhook::{EventData, EventType, WebhookEvent};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/webhooks")
}

#[test]
fn every_webhook_event_type_has_a_golden_vector_that_round_trips() {
    let files: BTreeSet<String> = fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let expected: BTreeSet<String> = EventType::ALL.iter().map(|t| format!("{t}.json")).collect();
    assert_eq!(files, expected, "one golden vector per event type");

    for &t in EventType::ALL {
        let text = fs::read_to_string(dir().join(format!("{t}.json"))).unwrap();
        let original: Value = serde_json::from_str(&text).unwrap();
        let event: WebhookEvent =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{t}: {e}"));
        assert_eq!(event.event_type(), Some(t), "{t}");
        assert_eq!(event.type_name(), t.as_str());
        assert!(!matches!(event.data, EventData::Other { .. }), "{t}");
        assert_eq!(serde_json::to_value(&event).unwrap(), original, "{t}");
        // `type` and `data` alone, as `EventData` writes them.
        let data = serde_json::to_value(&event.data).unwrap();
        assert_eq!(data["type"], original["type"], "{t}");
        assert_eq!(data["data"], original["data"], "{t}");
        let back: EventData = serde_json::from_value(data).unwrap();
        assert_eq!(back, event.data, "{t}");
        // A receiver that does not know the type keeps it as received.
        let unknown = text.replace(t.as_str(), "example.unknown");
        let other: WebhookEvent = serde_json::from_str(&unknown).unwrap();
        assert_eq!(
            other.data,
            EventData::Other {
                r#type: "example.unknown".into(),
                data: original["data"].clone(),
            }
        );
    }
}

#[test]
fn event_type_names_parse_back() {
    for &t in EventType::ALL {
        assert_eq!(t.as_str().parse::<EventType>(), Ok(t));
        assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        assert_eq!(
            serde_json::from_value::<EventType>(Value::from(t.as_str())).unwrap(),
            t
        );
    }
    assert!("payment.refunded".parse::<EventType>().is_err());
    assert_eq!(EventType::ALL.len(), 15);
    assert!(EventType::list(", ").starts_with("payment.settled, payment.failed, "));
}
