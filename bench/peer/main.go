// Command peer is a bare server doing sample3's job (the JSONP of a placement
// held in memory, the callback checked as Tsubame checks it, no log) on one of
// the HTTP engines Tsubame's public listener could be built on. make bench
// measures it beside Tsubame so that the engine's share of the gap to nginx,
// and Tsubame's own share, can be told apart:
//
//	peer -engine fasthttp -addr 127.0.0.1:18087   # fasthttp, a goroutine per connection
//	peer -engine gnet -addr 127.0.0.1:18088       # gnet event loops, fasthttp's request parser
//
// The gnet engine is a measuring stand-in, not a server: it handles requests
// without bodies only and trusts the client to send whole requests (wrk does).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"strconv"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/logging"
	"github.com/valyala/fasthttp"

	"tsubame/internal/render"
)

// placements are the demo set: id n serves ad{2n-1} and ad{2n}.
var placements = func() map[string][]byte {
	m := make(map[string][]byte, 1000)
	for n := 1; n <= 1000; n++ {
		m[strconv.Itoa(n)] = render.AppendURLs(nil, []string{
			fmt.Sprintf("http://ad%d.example.com/tag.js", 2*n-1),
			fmt.Sprintf("http://ad%d.example.com/tag.js", 2*n),
		})
	}
	return m
}()

var (
	apiPrefix = []byte("/api/")
	notFound  = []byte(`{"urls":[]}`)
)

// handle answers /api/<any>.js?id=&callback= like Tsubame's sample3.
func handle(ctx *fasthttp.RequestCtx) {
	if !bytes.HasPrefix(ctx.Path(), apiPrefix) {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		return
	}
	args := ctx.QueryArgs()
	cb := args.Peek("callback")
	if !render.ValidCallback(cb) {
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetBodyString("bad callback\n")
		return
	}
	payload, ok := placements[string(args.Peek("id"))]
	if !ok {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		payload = notFound
	}
	ctx.SetContentType(render.ContentTypeJS)
	render.Write(ctx, render.FormatJSONP, cb, payload)
}

func main() {
	engine := flag.String("engine", "fasthttp", "fasthttp or gnet")
	addr := flag.String("addr", "127.0.0.1:18087", "listen address")
	flag.Parse()
	var err error
	switch *engine {
	case "fasthttp":
		s := &fasthttp.Server{Handler: handle, NoDefaultServerHeader: true, NoDefaultContentType: true}
		err = s.ListenAndServe(*addr)
	case "gnet":
		err = gnet.Run(&loop{}, "tcp://"+*addr, gnet.WithMulticore(true),
			gnet.WithNumEventLoop(runtime.GOMAXPROCS(0)), gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithLogLevel(logging.ErrorLevel))
	default:
		err = fmt.Errorf("unknown engine %q", *engine)
	}
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// loop serves HTTP/1.1 on gnet's event loops: each readable connection's
// buffered requests are parsed with fasthttp's parser, answered in turn and
// written back in one write.
type loop struct{ gnet.BuiltinEventEngine }

// errWouldBlock marks a request that has not fully arrived.
var errWouldBlock = errors.New("would block")

type inbound struct{ c gnet.Conn }

func (in *inbound) Read(p []byte) (int, error) {
	n, _ := in.c.Read(p)
	if n == 0 {
		return 0, errWouldBlock
	}
	return n, nil
}

type outbound struct{ b []byte }

func (o *outbound) Write(p []byte) (int, error) { o.b = append(o.b, p...); return len(p), nil }

type conn struct {
	ctx fasthttp.RequestCtx
	in  inbound
	br  *bufio.Reader
	out outbound
	bw  *bufio.Writer
}

func (*loop) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	h := &conn{in: inbound{c}}
	h.br = bufio.NewReaderSize(&h.in, 4096)
	h.bw = bufio.NewWriterSize(&h.out, 4096)
	h.ctx.Init2(c, nil, false)
	c.SetContext(h)
	return nil, gnet.None
}

func (*loop) OnTraffic(c gnet.Conn) gnet.Action {
	h := c.Context().(*conn)
	for h.br.Buffered() > 0 || c.InboundBuffered() > 0 {
		if err := h.ctx.Request.Header.Read(h.br); err != nil {
			if errors.Is(err, errWouldBlock) {
				break
			}
			return gnet.Close
		}
		handle(&h.ctx)
		_ = h.ctx.Response.Write(h.bw)
		h.ctx.Request.Reset()
		h.ctx.Response.Reset()
	}
	_ = h.bw.Flush()
	if len(h.out.b) > 0 {
		_, _ = c.Write(h.out.b)
		h.out.b = h.out.b[:0]
	}
	return gnet.None
}
