//! [`KeyedRateLimitLayer`]: the configuration every service it wraps
//! shares (one `Arc`): the limiter, the key extractor, the missing-key
//! outcome, the refusal response and the policies' names.

use crate::headers::Policies;
use crate::key::KeyExtractor;
use crate::refusal::{default_response, MissingKey, Refusal};
use crate::service::KeyedRateLimit;
use bytes::Bytes;
use http::Response;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use stripecount::clock::MonotonicClock;
use stripecount::{Clock, ConfigError, KeyedLimiter};
use tower_layer::Layer;

/// A refusal's response builder.
pub(crate) type Respond = Arc<dyn Fn(&Refusal<'_>) -> Response<Bytes> + Send + Sync>;

/// A [`Layer`] that limits requests per key on a shared [`KeyedLimiter`].
///
/// Every service it makes, and every clone of those, decides on the same
/// limiter: one budget per key across all connections and clones. A request
/// takes one permit from its key, decided in `call` (never in
/// `poll_ready`, which only asks the inner service). A refused request is
/// answered at once, without calling the inner service: `429 Too Many
/// Requests` with `Retry-After` and the IETF `RateLimit` and
/// `RateLimit-Policy` fields (draft-ietf-httpapi-ratelimit-headers-10; see
/// [the crate docs](crate#the-fields)).
///
/// The limits (how many, per which window, in how many slices, several at
/// once, strict or not, per-key quotas, `max_keys` and the flood policy)
/// are the limiter's: build the [`KeyedLimiter`] as you want it, and keep
/// an `Arc` of it to change quotas or export metrics while serving.
///
/// # What `RateLimit-Policy`'s `w` means
/// `w` is the quota's window
/// ([`Quota::window`](stripecount::Quota::window)), `q` its limit. With a
/// [strict](stripecount::Quota::strict) quota, a key gets at most `q`
/// permits in every span of `w` seconds. Otherwise (the default, `S`
/// slices of `L = w / S`) the limit holds in any `S` consecutive slices,
/// so in any span of `w - L`, and a client may see up to the permits of
/// `S + 1` slices in a span of `w` (up to `2q`). Use `Quota::...strict()`
/// where clients rely on `w` literally; see [the crate
/// docs](crate#what-w-promises).
///
/// ```
/// use http::StatusCode;
/// use stripecount::{KeyedLimiter, Quota};
/// use stripecount_tower::{Header, KeyedRateLimitLayer, MissingKey};
///
/// // 10 a second and 1000 an hour per API key (the hour in 60 slices, in
/// // every span of an hour), at most 100k keys held.
/// let quotas = [Quota::per_second(10), Quota::per_hour(1000).slices(60).strict()];
/// let limiter = KeyedLimiter::builder(quotas).max_keys(100_000).build()?;
/// let layer = KeyedRateLimitLayer::new(limiter, Header::new(http::HeaderName::from_static("x-api-key")))
///     .missing_key(MissingKey::Refuse(StatusCode::UNAUTHORIZED))
///     .policy_names(&["burst", "hourly"])?
///     .fields_on_grant(true);
/// assert_eq!(layer.limiter().limit_count(), 2);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct KeyedRateLimitLayer<X: KeyExtractor, C: Clock = MonotonicClock, S = RandomState> {
    state: Arc<State<X, C, S>>,
}

/// What every service of a layer shares.
pub(crate) struct State<X: KeyExtractor, C: Clock, S> {
    pub(crate) limiter: Arc<KeyedLimiter<X::Key, C, S>>,
    pub(crate) extractor: Arc<X>,
    pub(crate) missing: MissingKey,
    pub(crate) on_grant: bool,
    pub(crate) policies: Policies,
    pub(crate) respond: Respond,
}

impl<X: KeyExtractor, C: Clock, S> Clone for State<X, C, S> {
    fn clone(&self) -> Self {
        State {
            limiter: Arc::clone(&self.limiter),
            extractor: Arc::clone(&self.extractor),
            missing: self.missing,
            on_grant: self.on_grant,
            policies: self.policies.clone(),
            respond: Arc::clone(&self.respond),
        }
    }
}

impl<X, C, S> KeyedRateLimitLayer<X, C, S>
where
    X: KeyExtractor,
    C: Clock,
    S: BuildHasher + Send + Sync + 'static,
{
    /// Limits requests by the key `extractor` finds, on `limiter` (a
    /// `KeyedLimiter` or an `Arc` of one, to keep using it elsewhere).
    /// Defaults: a request without a key is refused with `400 Bad Request`
    /// ([`MissingKey`]), refusals get [`default_response`], granted
    /// responses get no rate-limit fields, policies are named after their
    /// windows (`"1s"`, `"1h"`).
    pub fn new(limiter: impl Into<Arc<KeyedLimiter<X::Key, C, S>>>, extractor: X) -> Self {
        let limiter = limiter.into();
        let windows: Vec<_> = (0..limiter.limit_count())
            .filter_map(|i| limiter.window_of(i))
            .collect();
        KeyedRateLimitLayer {
            state: Arc::new(State {
                policies: Policies::new(&windows),
                limiter,
                extractor: Arc::new(extractor),
                missing: MissingKey::default(),
                on_grant: false,
                respond: Arc::new(default_response),
            }),
        }
    }
}

impl<X: KeyExtractor, C: Clock, S> KeyedRateLimitLayer<X, C, S> {
    /// What a request without a key gets (see [`MissingKey`]).
    pub fn missing_key(mut self, outcome: MissingKey) -> Self {
        self.state_mut().missing = outcome;
        self
    }

    /// Whether granted responses carry `RateLimit` and `RateLimit-Policy`
    /// too (off by default; refusals always do). The draft lets a server
    /// send them on any response.
    pub fn fields_on_grant(mut self, on: bool) -> Self {
        self.state_mut().on_grant = on;
        self
    }

    /// Names the limiter's policies in `RateLimit-Policy` and `RateLimit`,
    /// one name per limit, in the limiter's order.
    ///
    /// Errors ([`ConfigError::Invalid`]): another number of names than the
    /// limiter has limits; an empty name, or one with a character outside
    /// printable ASCII (what a Structured Field string can hold).
    pub fn policy_names(mut self, names: &[&str]) -> Result<Self, ConfigError> {
        self.state_mut().policies.set_names(names)?;
        Ok(self)
    }

    /// Builds refusals' responses (status, headers, body) with `respond`
    /// instead of [`default_response`]. The layer adds the rate-limit
    /// fields of a [`Refusal::Limited`] to what it returns.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use std::net::IpAddr;
    /// use stripecount::{KeyedLimiter, Quota};
    /// use stripecount_tower::{KeyedRateLimitLayer, PeerIp, Refusal};
    ///
    /// let limiter = KeyedLimiter::<IpAddr>::new(Quota::per_minute(100).slices(6))?;
    /// let layer = KeyedRateLimitLayer::new(limiter, PeerIp::new()).refusal(|r: &Refusal<'_>| {
    ///     let body = match r {
    ///         Refusal::Limited(d) => format!("{{\"error\":\"slow down\",\"limit\":{}}}", d.limit()),
    ///         _ => "{\"error\":\"who are you?\"}".to_owned(),
    ///     };
    ///     Response::builder()
    ///         .status(StatusCode::TOO_MANY_REQUESTS)
    ///         .header("content-type", "application/json")
    ///         .body(Bytes::from(body))
    ///         .unwrap()
    /// });
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn refusal<F>(mut self, respond: F) -> Self
    where
        F: Fn(&Refusal<'_>) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.state_mut().respond = Arc::new(respond);
        self
    }

    /// The limiter (to change quotas, read figures, or register it with a
    /// metrics collector).
    pub fn limiter(&self) -> &Arc<KeyedLimiter<X::Key, C, S>> {
        &self.state.limiter
    }

    fn state_mut(&mut self) -> &mut State<X, C, S> {
        Arc::make_mut(&mut self.state)
    }
}

impl<X: KeyExtractor, C: Clock, S> Clone for KeyedRateLimitLayer<X, C, S> {
    fn clone(&self) -> Self {
        KeyedRateLimitLayer {
            state: Arc::clone(&self.state),
        }
    }
}

impl<Svc, X: KeyExtractor, C: Clock, S> Layer<Svc> for KeyedRateLimitLayer<X, C, S> {
    type Service = KeyedRateLimit<Svc, X, C, S>;

    fn layer(&self, inner: Svc) -> Self::Service {
        KeyedRateLimit::new(inner, Arc::clone(&self.state))
    }
}

impl<X: KeyExtractor, C: Clock, S> fmt::Debug for KeyedRateLimitLayer<X, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.state.fmt(f)
    }
}

impl<X: KeyExtractor, C: Clock, S> fmt::Debug for State<X, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimitLayer")
            .field("limiter", &self.limiter)
            .field("missing", &self.missing)
            .field("on_grant", &self.on_grant)
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}
