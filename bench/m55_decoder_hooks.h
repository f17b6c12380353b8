/* Included first into bench/m55_decoder.py's golden cases: the timing hooks the generated runs call. */
void bench_begin(void);
void bench_end(void);
