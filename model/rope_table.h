/* model/rope_table.h: the RoPE cos/sin tables, built on the host (model/ops_rope.c) and
 * uploaded to a model's device once at creation. */
#ifndef MODEL_ROPE_TABLE_H
#define MODEL_ROPE_TABLE_H

/* cos_t/sin_t (max_seq, hd/2): the angle of position p and pair i is p * theta^(-2i/hd). */
void rope_table_init(float *cos_t /* (max_seq, hd/2) */, float *sin_t /* (max_seq, hd/2) */,
                     int max_seq, int hd, float theta);
#endif
