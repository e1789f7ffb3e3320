-- wrk script for the HTTP benchmark: every request POSTs the same NLIP text message.
wrk.method = "POST"
wrk.body = '{"format":"text","subformat":"english","content":"Hello"}'
wrk.headers["Content-Type"] = "application/json"
