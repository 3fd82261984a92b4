//! [`KeyedRateLimitLayer`]: the configuration every service it wraps
//! shares (one `Arc`): the limiter, the key extractor, the requests that
//! skip the limit, the missing-key outcome, the refusal response and the
//! policies' names.

use crate::headers::Policies;
use crate::key::KeyExtractor;
use crate::limit::LayerLimiter;
use crate::refusal::{default_response, MissingKey, Refusal};
use crate::service::KeyedRateLimit;
use bytes::Bytes;
use http::request::Parts;
use http::Response;
use std::fmt;
use std::sync::Arc;
use stripecount::{ConfigError, KeyedLimiter};
use tower_layer::Layer;

/// A refusal's response builder.
pub(crate) type Respond = Arc<dyn Fn(&Refusal<'_>) -> Response<Bytes> + Send + Sync>;

/// Which requests pass without taking a permit.
pub(crate) type Skip = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// A [`Layer`] that limits requests per key on a shared limiter: a
/// [`KeyedLimiter`] (the default), a direct `RateLimiter` with the
/// [`Global`](crate::Global) key, stripecount-redis's `ClusterLimiter`
/// for a limit across a fleet (feature `redis`), or any
/// [`LayerLimiter`].
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
pub struct KeyedRateLimitLayer<X: KeyExtractor, L = KeyedLimiter<<X as KeyExtractor>::Key>> {
    state: Arc<State<X, L>>,
}

/// What every service of a layer shares.
pub(crate) struct State<X: KeyExtractor, L> {
    pub(crate) limiter: Arc<L>,
    pub(crate) extractor: Arc<X>,
    pub(crate) skip: Option<Skip>,
    pub(crate) missing: MissingKey,
    pub(crate) on_grant: bool,
    pub(crate) policies: Policies,
    pub(crate) respond: Respond,
}

impl<X: KeyExtractor, L> Clone for State<X, L> {
    fn clone(&self) -> Self {
        State {
            limiter: Arc::clone(&self.limiter),
            extractor: Arc::clone(&self.extractor),
            skip: self.skip.clone(),
            missing: self.missing,
            on_grant: self.on_grant,
            policies: self.policies.clone(),
            respond: Arc::clone(&self.respond),
        }
    }
}

impl<X, L> KeyedRateLimitLayer<X, L>
where
    X: KeyExtractor,
    L: LayerLimiter<X::Ref>,
{
    /// Limits requests by the key `extractor` finds, on `limiter` (a
    /// `KeyedLimiter`, or an `Arc` of one to keep using it elsewhere; any
    /// [`LayerLimiter`]). Defaults: every request takes a permit, a request
    /// without a key is refused with `400 Bad Request` ([`MissingKey`]),
    /// refusals get [`default_response`], granted responses get no
    /// rate-limit fields, policies are named after their windows (`"1s"`,
    /// `"1h"`).
    pub fn new(limiter: L, extractor: X) -> Self {
        let policies = Policies::new(&limiter.windows());
        KeyedRateLimitLayer {
            state: Arc::new(State {
                policies,
                limiter: Arc::new(limiter),
                extractor: Arc::new(extractor),
                skip: None,
                missing: MissingKey::default(),
                on_grant: false,
                respond: Arc::new(default_response),
            }),
        }
    }
}

impl<X: KeyExtractor, L> KeyedRateLimitLayer<X, L> {
    /// Requests for which `skip` is true pass to the inner service
    /// unlimited: they take no permit, get no rate-limit fields, and need
    /// no key. For CORS preflights, health checks, static assets.
    ///
    /// ```
    /// use http::Method;
    /// use std::net::IpAddr;
    /// use stripecount::{KeyedLimiter, Quota};
    /// use stripecount_tower::{KeyedRateLimitLayer, PeerIp};
    ///
    /// let limiter = KeyedLimiter::<IpAddr>::new(Quota::per_second(10))?;
    /// let layer = KeyedRateLimitLayer::new(limiter, PeerIp::new()).skip_if(|req| {
    ///     req.method == Method::OPTIONS || req.uri.path().starts_with("/health")
    /// });
    /// # let _ = layer;
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn skip_if<F>(mut self, skip: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.state_mut().skip = Some(Arc::new(skip));
        self
    }

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
    pub fn limiter(&self) -> &Arc<L> {
        &self.state.limiter
    }

    fn state_mut(&mut self) -> &mut State<X, L> {
        Arc::make_mut(&mut self.state)
    }
}

impl<X: KeyExtractor, L> Clone for KeyedRateLimitLayer<X, L> {
    fn clone(&self) -> Self {
        KeyedRateLimitLayer {
            state: Arc::clone(&self.state),
        }
    }
}

impl<Svc, X: KeyExtractor, L> Layer<Svc> for KeyedRateLimitLayer<X, L> {
    type Service = KeyedRateLimit<Svc, X, L>;

    fn layer(&self, inner: Svc) -> Self::Service {
        KeyedRateLimit::new(inner, Arc::clone(&self.state))
    }
}

impl<X: KeyExtractor, L: fmt::Debug> fmt::Debug for KeyedRateLimitLayer<X, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.state.fmt(f)
    }
}

impl<X: KeyExtractor, L: fmt::Debug> fmt::Debug for State<X, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimitLayer")
            .field("limiter", &self.limiter)
            .field("skip", &self.skip.is_some())
            .field("missing", &self.missing)
            .field("on_grant", &self.on_grant)
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}
