package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Quotas bound what one tenant may take of the ledger and of JetStream, so
// that a tenant at its bounds leaves every other tenant and every service
// working (issue 29: 2,000 pulls with distinct feed names from one user
// took all of RATH_SESSIONS' consumers, the services' included). Rath's
// services are never bound. Zero lifts a bound; the defaults
// (DefaultQuotas) are what docs/operations.md#quotas lists.
type Quotas struct {
	// FeedsPerTenant bounds the durable feeds (the pull operation) a
	// tenant keeps: each is a JetStream consumer on RATH_SESSIONS. They are
	// counted from JetStream, by name, so a restart forgets none.
	FeedsPerTenant int
	// Feeds bounds the durable feeds of all tenants together, below the
	// stream's consumer limit (nats-server's default_max_consumers, 1000
	// per stream unless the stream or account sets one), so that the
	// services' durable consumers and the ordered consumers of long reads
	// always fit in the rest.
	Feeds int
	// StartsPerMinute bounds the sessions a tenant starts or forks in any
	// minute (a bucket of that many that refills over a minute), counted in
	// each ledger's memory.
	StartsPerMinute int
	// BlobBytes bounds the bytes of blobs a tenant's users add with
	// put_blob. Blobs are stored by content and shared: storing content
	// that is stored already adds nothing. Counted in the rath-quota bucket,
	// so a restart forgets nothing.
	BlobBytes int64
	// Pulls bounds the pull requests of one tenant a ledger works on at
	// once: a pull may wait up to five seconds for a feed's event, and the
	// ledger handles a bounded number of requests at once for everyone.
	Pulls int
}

// DefaultQuotas are the bounds of rath up and the session-ledger service
// without flags: well above what the examples, the demo and the test
// suite's tenants use, well below what would crowd out other tenants.
func DefaultQuotas() Quotas {
	return Quotas{FeedsPerTenant: 64, Feeds: 512, StartsPerMinute: 240, BlobBytes: 1 << 30, Pulls: 64}
}

// The flags that set each quota, named in every refusal.
const (
	flagFeedsPerTenant  = "quota-feeds"
	flagFeeds           = "quota-feeds-all"
	flagStartsPerMinute = "quota-starts-per-minute"
	flagBlobBytes       = "quota-blob-bytes"
	flagPulls           = "quota-pulls"
)

// flagSet is what Flags needs of a flag set: the standard library's and
// pflag's (cobra's) both have it.
type flagSet interface {
	IntVar(p *int, name string, value int, usage string)
	Int64Var(p *int64, name string, value int64, usage string)
}

// Flags defines the quota flags on f, with q's values as the defaults: one
// definition for rath up and the session-ledger service.
func (q *Quotas) Flags(f flagSet) {
	f.IntVar(&q.FeedsPerTenant, flagFeedsPerTenant, q.FeedsPerTenant, "durable feeds (the ledger's pull operation) one tenant may keep, each a JetStream consumer (0: no bound)")
	f.IntVar(&q.Feeds, flagFeeds, q.Feeds, "durable feeds all tenants together may keep; keep it below the sessions stream's consumer limit (nats-server's default: 1000), leaving room for the services' consumers (0: no bound)")
	f.IntVar(&q.StartsPerMinute, flagStartsPerMinute, q.StartsPerMinute, "sessions one tenant may start or fork per minute (0: no bound)")
	f.Int64Var(&q.BlobBytes, flagBlobBytes, q.BlobBytes, "bytes of new blobs one tenant's users may store with put_blob (0: no bound)")
	f.IntVar(&q.Pulls, flagPulls, q.Pulls, "pull requests of one tenant a ledger works on at once (0: no bound)")
}

// Validate reports every negative bound.
func (q Quotas) Validate() error {
	var errs []error
	for _, b := range []struct {
		flag string
		v    int64
	}{
		{flagFeedsPerTenant, int64(q.FeedsPerTenant)}, {flagFeeds, int64(q.Feeds)}, {flagStartsPerMinute, int64(q.StartsPerMinute)},
		{flagBlobBytes, q.BlobBytes}, {flagPulls, int64(q.Pulls)},
	} {
		if b.v < 0 {
			errs = append(errs, fmt.Errorf("--%s must not be negative (0: no bound), got %d", b.flag, b.v))
		}
	}
	return errors.Join(errs...)
}

// overQuota is the refusal of a request that would take a tenant past a
// quota: it names the quota, its limit and the flag that raises it.
func overQuota(quota string, limit int64, flag, format string, args ...any) *api.Error {
	return api.Errorf(api.CodeQuotaExceeded, "%s (quota %s: %d; an operator raises it with --%s)", fmt.Sprintf(format, args...), quota, limit, flag)
}

// bound reports whether p is bound by quotas: services are not.
func bound(p events.Principal) bool { return !p.IsService() }

// quotaState is what a ledger keeps in memory for its quotas.
type quotaState struct {
	mu     sync.Mutex
	starts map[string]*startBucket  // by tenant
	pulls  map[string]int           // pulls in flight, by tenant
	feeds  map[string]chan struct{} // one feed creation at a time, by tenant
	logged map[string]time.Time     // last refusal logged, by tenant and quota

	usageMu sync.Mutex
	usage   jetstream.KeyValue // the rath-quota bucket, once created
	blobs   jetstream.ObjectStore
}

// startBucket holds the starts a tenant has left, refilled continuously at
// StartsPerMinute a minute up to StartsPerMinute.
type startBucket struct {
	left float64
	at   time.Time
}

// takeStart spends one of the tenant's starts, or refuses naming when the
// next one is due.
func (l *Ledger) takeStart(ctx context.Context, id string) error {
	p, limit := principalOf(ctx), l.cfg.Quotas.StartsPerMinute
	if !bound(p) || limit == 0 {
		return nil
	}
	now := l.now()
	q := &l.quota
	q.mu.Lock()
	b := q.starts[p.Tenant]
	if b == nil {
		b = &startBucket{left: float64(limit), at: now}
		q.starts[p.Tenant] = b
	}
	rate := float64(limit) / float64(time.Minute)
	b.left = min(float64(limit), b.left+rate*float64(now.Sub(b.at)))
	b.at = now
	if b.left < 1 {
		wait := time.Duration((1 - b.left) / rate).Round(time.Millisecond)
		q.mu.Unlock()
		err := overQuota("starts-per-minute", int64(limit), flagStartsPerMinute, "tenant %s started %d sessions in the last minute, its quota: session %s not started; ask again in %s", p.Tenant, limit, id, max(wait, time.Millisecond))
		l.refused(p, "starts-per-minute", err)
		return err
	}
	b.left--
	q.mu.Unlock()
	return nil
}

// enterPull counts a pull of p's tenant in flight; leave ends it.
func (l *Ledger) enterPull(p events.Principal) (leave func(), err error) {
	limit := l.cfg.Quotas.Pulls
	if !bound(p) || limit == 0 {
		return func() {}, nil
	}
	q := &l.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pulls[p.Tenant] >= limit {
		err := overQuota("pulls", int64(limit), flagPulls, "tenant %s has %d pulls in flight, its quota: wait for their answers before pulling more", p.Tenant, limit)
		l.refusedLocked(p, "pulls", err)
		return nil, err
	}
	q.pulls[p.Tenant]++
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.pulls[p.Tenant]--; q.pulls[p.Tenant] == 0 {
			delete(q.pulls, p.Tenant)
		}
	}, nil
}

// refused logs a quota refusal, at most once a minute per tenant and
// quota: a tenant hammering at its quota must not flood the log. Every
// refusal counts in rath_requests_total{outcome="quota_exceeded"}; a
// refused proposal (a start) is also recorded on the rejections stream.
func (l *Ledger) refused(p events.Principal, quota string, err error) {
	l.quota.mu.Lock()
	defer l.quota.mu.Unlock()
	l.refusedLocked(p, quota, err)
}

func (l *Ledger) refusedLocked(p events.Principal, quota string, err error) {
	key, now := p.Tenant+"\x00"+quota, l.now()
	if last, ok := l.quota.logged[key]; ok && now.Sub(last) < time.Minute {
		return
	}
	l.quota.logged[key] = now
	l.log.Warn("quota reached", "tenant", p.Tenant, "actor", p.String(), "quota", quota, "err", err)
}

// feedPrefix starts the consumer name of every feed of a tenant, so that
// the tenant's feeds are counted by name: a digest, since tenant names may
// hold '-' and one may start another.
func feedPrefix(tenant string) string {
	sum := sha256.Sum256([]byte("rath feed tenant\x00" + tenant))
	return feedsPrefix + hex.EncodeToString(sum[:4]) + "-"
}

// feedsPrefix starts the consumer name of every feed.
const feedsPrefix = "feed-"

// lockFeeds serialises the creation of a tenant's feeds in this ledger, so
// that concurrent pulls cannot together pass the count; unlock ends it.
// Ledgers of one deployment do not share it: each may overshoot by the
// feeds it creates at the same moment as the others.
func (l *Ledger) lockFeeds(ctx context.Context, tenant string) (unlock func(), err error) {
	l.quota.mu.Lock()
	ch := l.quota.feeds[tenant]
	if ch == nil {
		ch = make(chan struct{}, 1)
		l.quota.feeds[tenant] = ch
	}
	l.quota.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, unavailable(fmt.Errorf("feed of tenant %s: %w", tenant, ctx.Err()))
	}
}

// admitFeed refuses a new feed of f's tenant at the tenant's quota or at
// the quota of all tenants' feeds. It counts the consumers on
// RATH_SESSIONS by name, so feeds created before a restart, or by another
// ledger, count.
func (l *Ledger) admitFeed(ctx context.Context, f feed, p events.Principal) error {
	per, all := l.cfg.Quotas.FeedsPerTenant, l.cfg.Quotas.Feeds
	if per == 0 && all == 0 {
		return nil
	}
	st, err := l.store.JetStream().Stream(ctx, events.StreamSessions)
	if err != nil {
		return unavailable(fmt.Errorf("count feeds: %w", err))
	}
	mine, feeds := 0, 0
	prefix := feedPrefix(f.tenant)
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		if strings.HasPrefix(name, feedsPrefix) {
			feeds++
		}
		if strings.HasPrefix(name, prefix) {
			mine++
		}
	}
	if err := names.Err(); err != nil {
		return unavailable(fmt.Errorf("count feeds: %w", err))
	}
	idle := fmt.Sprintf("a feed nobody pulls for %s is removed", api.FeedIdle)
	var refusal *api.Error
	quota := "feeds"
	switch {
	case per > 0 && mine >= per:
		refusal = overQuota(quota, int64(per), flagFeedsPerTenant, "tenant %s keeps %d durable feeds, its quota: feed %q%s not created (pull from a feed it has; %s, or an operator removes it)", f.tenant, mine, f.consumer, sessionNote(f.session), idle)
	case all > 0 && feeds >= all:
		quota = "feeds-all"
		refusal = overQuota(quota, int64(all), flagFeeds, "the tenants keep %d durable feeds together, the server's quota: feed %q%s of tenant %s not created (%s)", feeds, f.consumer, sessionNote(f.session), f.tenant, idle)
	default:
		return nil
	}
	l.refused(p, quota, refusal)
	return refusal
}

// usageBucket is the bucket of what tenants have used of their durable
// quotas: key blob-bytes.<tenant>, the bytes of blobs the tenant added, in
// decimal.
const usageBucket = "rath-quota"

// quotaStores returns the usage bucket, created on first use replicated as
// RATH_SESSIONS is, and the blob store.
func (l *Ledger) quotaStores(ctx context.Context) (jetstream.KeyValue, jetstream.ObjectStore, error) {
	q := &l.quota
	q.usageMu.Lock()
	defer q.usageMu.Unlock()
	if q.usage != nil {
		return q.usage, q.blobs, nil
	}
	js := l.store.JetStream()
	st, err := js.Stream(ctx, events.StreamSessions)
	if err != nil {
		return nil, nil, fmt.Errorf("quota bucket: %w", err)
	}
	blobs, err := js.ObjectStore(ctx, events.BucketBlobs)
	if err != nil {
		return nil, nil, fmt.Errorf("quota bucket: %w", err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      usageBucket,
		Description: "Rath: what each tenant has used of the ledger's durable quotas (blob bytes)",
		Storage:     jetstream.FileStorage,
		Replicas:    st.CachedInfo().Config.Replicas,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("quota bucket %s: %w", usageBucket, err)
	}
	q.usage, q.blobs = kv, blobs
	return kv, blobs, nil
}

// maxUsageRetries bounds the compare-and-set rounds of one usage update.
const maxUsageRetries = 32

// addUsage adds n (negative: gives back) to a counter of the usage bucket,
// unless the sum would pass limit (0: no limit); it returns the counter's
// value before, and whether n was added.
func addUsage(ctx context.Context, kv jetstream.KeyValue, key string, n, limit int64) (int64, bool, error) {
	for range maxUsageRetries {
		var cur int64
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, false, fmt.Errorf("read %s: %w", key, err)
		default:
			if cur, err = strconv.ParseInt(string(e.Value()), 10, 64); err != nil {
				return 0, false, fmt.Errorf("read %s: %q is not a count: %w", key, e.Value(), err)
			}
			rev = e.Revision()
		}
		if n > 0 && limit > 0 && cur+n > limit {
			return cur, false, nil
		}
		v := []byte(strconv.FormatInt(max(cur+n, 0), 10))
		if rev == 0 {
			_, err = kv.Create(ctx, key, v)
		} else {
			_, err = kv.Update(ctx, key, v, rev)
		}
		if err == nil {
			return cur, true, nil
		}
		var apiErr *jetstream.APIError
		if !errors.Is(err, jetstream.ErrKeyExists) && !(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
			return 0, false, fmt.Errorf("update %s: %w", key, err)
		}
		// Another ledger updated it first: read it again.
	}
	return 0, false, fmt.Errorf("update %s: %d concurrent updates won in a row", key, maxUsageRetries)
}

// putBlob stores a tenant's blob within its quota of blob bytes: content
// stored already (by anyone) adds nothing; new content is counted before it
// is stored and given back if storing fails.
func (l *Ledger) putBlob(ctx context.Context, data []byte) (string, error) {
	p, limit := principalOf(ctx), l.cfg.Quotas.BlobBytes
	if !bound(p) || limit == 0 {
		return l.store.PutBlob(ctx, data)
	}
	kv, blobs, err := l.quotaStores(ctx)
	if err != nil {
		return "", err
	}
	ref := eventstore.BlobRef(data)
	if _, err := blobs.GetInfo(ctx, strings.TrimPrefix(ref, "sha256:")); err == nil {
		return ref, nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", fmt.Errorf("blob %s: %w", ref, err)
	}
	key := "blob-bytes." + p.Tenant
	n := int64(len(data))
	used, ok, err := addUsage(ctx, kv, key, n, limit)
	if err != nil {
		return "", err
	}
	if !ok {
		refusal := overQuota("blob-bytes", limit, flagBlobBytes, "tenant %s has stored %d bytes of blobs, its quota: a new blob of %d bytes would pass it; not stored", p.Tenant, used, n)
		l.refused(p, "blob-bytes", refusal)
		return "", refusal
	}
	stored, err := l.store.PutBlob(ctx, data)
	if err != nil {
		if _, _, gerr := addUsage(context.WithoutCancel(ctx), kv, key, -n, 0); gerr != nil {
			l.log.Warn("blob bytes not given back after a failed put", "tenant", p.Tenant, "bytes", n, "err", gerr)
		}
		return "", err
	}
	return stored, nil
}
