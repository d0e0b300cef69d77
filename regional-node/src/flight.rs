//! Request coalescing: concurrent requests for one cache key share one flight to the core.
//!
//! The first request for a key that misses the exact cache becomes the flight's leader: a task of
//! its own (so it lands even if that client leaves) looks the key up at the core, tries the
//! semantic tier, and otherwise generates, publishing each text delta and then the outcome. Every
//! request for the key while the flight is in the air (the leader's own included) subscribes and
//! reads the same log from its start, so a late follower of a streaming answer still gets every
//! delta. A landed flight leaves the map; later requests find the answer in the exact cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use shared::completion::CachedCompletion;
use shared::openai::TokenLogprob;
use shared::server_timing::ServerTiming;
use shared::RequestError;
use tokio::sync::watch;

use crate::semantic::cache::SemanticHit;

/// How a flight ended well: the entry and where it came from.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The answer.
    pub entry: Arc<CachedCompletion>,
    /// `X-Cache` of the answer: `HIT-CORE`, `HIT-REGIONAL-SEMANTIC` or `MISS`.
    pub x_cache: &'static str,
    /// The flight's `Server-Timing`.
    pub timing: ServerTiming,
    /// The matched question, for a semantic hit.
    pub semantic: Option<SemanticHit>,
}

/// One thing a subscriber reads.
#[derive(Debug, Clone)]
pub enum FlightItem {
    /// Generated text.
    Delta(Arc<Piece>),
    /// One choice of several ended (the landing ends the others, and a single one).
    ChoiceEnd {
        /// Which.
        choice: u32,
        /// `stop` or `length`.
        finish_reason: Arc<str>,
    },
    /// The end: the answer, or why there is none.
    Landed(Result<Outcome, RequestError>),
}

/// Generated text of one choice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Piece {
    /// The choice (0 unless the request asked for several sampled ones).
    pub choice: u32,
    /// The text.
    pub text: String,
    /// The log-probabilities of the tokens it completes, when the request asked for them.
    pub logprobs: Option<Vec<TokenLogprob>>,
}

impl Piece {
    /// Text of choice 0 and nothing else.
    pub fn text(text: &str) -> Self {
        Self { choice: 0, text: text.to_owned(), logprobs: None }
    }
}

/// One key's flight.
#[derive(Debug)]
pub struct Flight {
    log: Mutex<Vec<FlightItem>>,
    /// The number of items in the log, for waking subscribers.
    length: watch::Sender<usize>,
    /// The model answering instead of the asked one (the core fell back), set before any item.
    fallback_model: Mutex<Option<String>>,
    /// The model `auto` chose, set before any item.
    auto_model: Mutex<Option<String>>,
}

/// Whether a request leads the flight for its key or follows one already in the air.
pub enum Joined {
    /// This request starts the work.
    Leader(Arc<Flight>),
    /// Another request already did.
    Follower(Arc<Flight>),
}

/// The flights in the air, by key.
#[derive(Debug, Default)]
pub struct Flights {
    in_air: Mutex<HashMap<String, Arc<Flight>>>,
}

impl Flights {
    /// Joins the flight for `key`, starting one if there is none.
    pub fn join(&self, key: &str) -> Joined {
        let mut in_air = self.in_air.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(flight) = in_air.get(key) {
            return Joined::Follower(Arc::clone(flight));
        }
        let flight = Arc::new(Flight::new());
        in_air.insert(key.to_string(), Arc::clone(&flight));
        Joined::Leader(flight)
    }

    /// Takes `flight` out of the air once it has landed (a newer flight under the key stays).
    pub fn land(&self, key: &str, flight: &Arc<Flight>) {
        let mut in_air = self.in_air.lock().unwrap_or_else(PoisonError::into_inner);
        if in_air.get(key).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            in_air.remove(key);
        }
    }

    /// Lands `flight` with an error unless it already landed, and takes it out of the air: what the
    /// leader's task does when it ends without an answer (it panicked, or was dropped), so that its
    /// followers get an error and later requests a new flight, instead of waiting for good.
    pub fn abandon(&self, key: &str, flight: &Arc<Flight>) {
        flight.land(Err(RequestError::upstream(502, "the flight's leader ended without an answer")));
        self.land(key, flight);
    }

    /// Flights in the air.
    pub fn len(&self) -> usize {
        self.in_air.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no flight is in the air.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Flight {
    fn default() -> Self {
        Self::new()
    }
}

impl Flight {
    /// A flight of its own, in no [`Flights`] map (for a request that must not be coalesced).
    pub fn new() -> Self {
        Self {
            log: Mutex::new(Vec::new()),
            length: watch::channel(0).0,
            fallback_model: Mutex::new(None),
            auto_model: Mutex::new(None),
        }
    }

    fn push(&self, item: FlightItem) {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(log.last(), Some(FlightItem::Landed(_))) {
            return;
        }
        log.push(item);
        self.length.send_replace(log.len());
    }

    /// Records that `model` answers instead of the asked one (before any item is published).
    pub fn fall_back_to(&self, model: &str) {
        *self.fallback_model.lock().unwrap_or_else(PoisonError::into_inner) = Some(model.to_owned());
    }

    /// The model answering instead of the asked one, if the core fell back.
    pub fn fallback_model(&self) -> Option<String> {
        self.fallback_model.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Records the model `auto` chose (before any item is published).
    pub fn chosen_by_auto(&self, model: &str) {
        *self.auto_model.lock().unwrap_or_else(PoisonError::into_inner) = Some(model.to_owned());
    }

    /// The model `auto` chose, if the request asked for `auto` and the core has said.
    pub fn auto_model(&self) -> Option<String> {
        self.auto_model.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Publishes generated text.
    pub fn delta(&self, piece: Piece) {
        self.push(FlightItem::Delta(Arc::new(piece)));
    }

    /// Publishes the end of one choice of several.
    pub fn choice_end(&self, choice: u32, finish_reason: &str) {
        self.push(FlightItem::ChoiceEnd { choice, finish_reason: Arc::from(finish_reason) });
    }

    /// Publishes the end; anything published after it is ignored.
    pub fn land(&self, outcome: Result<Outcome, RequestError>) {
        self.push(FlightItem::Landed(outcome));
    }

    /// Whether anyone still reads the flight (every request that joined it and has not gone away).
    pub fn has_subscribers(&self) -> bool {
        self.length.receiver_count() > 0
    }

    /// A reader of the log from its start.
    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        Subscription { flight: Arc::clone(self), next: 0, length: self.length.subscribe() }
    }
}

/// A reader of one flight's log.
#[derive(Debug)]
pub struct Subscription {
    flight: Arc<Flight>,
    next: usize,
    length: watch::Receiver<usize>,
}

impl Subscription {
    /// The model answering instead of the asked one, if the core fell back (known once the first item
    /// has come).
    pub fn fallback_model(&self) -> Option<String> {
        self.flight.fallback_model()
    }

    /// The model `auto` chose (known once the first item has come).
    pub fn auto_model(&self) -> Option<String> {
        self.flight.auto_model()
    }

    /// The next item, waiting for it; `None` after the landing (or if the flight was abandoned
    /// without one, which [`Flights`] users prevent by always landing).
    pub async fn next(&mut self) -> Option<FlightItem> {
        loop {
            {
                let log = self.flight.log.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(item) = log.get(self.next) {
                    self.next += 1;
                    return Some(item.clone());
                }
                if matches!(log.last(), Some(FlightItem::Landed(_))) {
                    return None;
                }
            }
            if self.length.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Skips the deltas and waits for the landing.
    pub async fn landed(&mut self) -> Result<Outcome, RequestError> {
        while let Some(item) = self.next().await {
            if let FlightItem::Landed(outcome) = item {
                return outcome;
            }
        }
        Err(RequestError::upstream(502, "the request this one was coalesced with ended without an answer"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        let entry = CachedCompletion {
            tenant: "t".into(),
            completion_tokens: 2,
            ..CachedCompletion::example("k", "ab")
        };
        Outcome { entry: Arc::new(entry), x_cache: "MISS", timing: ServerTiming::default(), semantic: None }
    }

    #[tokio::test]
    async fn followers_share_the_leaders_flight_and_read_it_from_the_start() {
        let flights = Flights::default();
        let Joined::Leader(flight) = flights.join("k") else { panic!("the first request leads") };
        let Joined::Follower(same) = flights.join("k") else { panic!("the second follows") };
        assert!(Arc::ptr_eq(&flight, &same));
        assert!(matches!(flights.join("other"), Joined::Leader(_)));

        assert!(!flight.has_subscribers(), "nobody reads it yet");
        let mut early = same.subscribe();
        assert!(flight.has_subscribers());
        flight.delta(Piece::text("a"));
        let reader = tokio::spawn(async move {
            let mut text = String::new();
            while let Some(item) = early.next().await {
                match item {
                    FlightItem::Delta(d) => text.push_str(&d.text),
                    FlightItem::ChoiceEnd { .. } => {}
                    FlightItem::Landed(o) => return (text, o.map(|o| o.entry.content.clone())),
                }
            }
            (text, Err(RequestError::internal("no landing")))
        });
        tokio::task::yield_now().await;
        flight.delta(Piece::text("b"));
        flight.land(Ok(outcome()));
        flight.delta(Piece::text("ignored after landing"));
        flights.land("k", &flight);
        assert!(matches!(flights.join("k"), Joined::Leader(_)), "a landed flight leaves the air");

        let (text, content) = reader.await.expect("reader");
        assert_eq!(text, "ab");
        assert_eq!(content.ok(), Some("ab".to_string()));
        // A subscriber that comes after the landing still reads everything.
        let mut late = flight.subscribe();
        assert!(matches!(late.next().await, Some(FlightItem::Delta(_))));
        assert_eq!(late.landed().await.map(|o| o.x_cache).ok(), Some("MISS"));
    }

    #[tokio::test]
    async fn a_leader_that_panics_leaves_its_followers_an_error_and_the_key_free() {
        struct Leader {
            flights: Arc<Flights>,
            flight: Arc<Flight>,
        }
        impl Drop for Leader {
            fn drop(&mut self) {
                self.flights.abandon("k", &self.flight);
            }
        }
        let flights = Arc::new(Flights::default());
        let Joined::Leader(flight) = flights.join("k") else { panic!("the first is the leader") };
        let Joined::Follower(follower) = flights.join("k") else { panic!("the second follows") };
        let mut waiting = follower.subscribe();
        let leader = Leader { flights: Arc::clone(&flights), flight };
        let task = tokio::spawn(async move {
            let _leader = leader;
            panic!("the leader's task panics mid-flight");
        });
        assert!(task.await.is_err(), "the task panicked");
        let landed = tokio::time::timeout(std::time::Duration::from_secs(2), waiting.landed()).await;
        assert_eq!(landed.expect("the follower is not left waiting").map_err(|e| e.status).err(), Some(502));
        assert!(flights.is_empty(), "the key is free for a new flight");
        assert!(matches!(flights.join("k"), Joined::Leader(_)));
    }
}
