/* GENERATED FILE - do not edit. Generated from custom_ops/src/mcubert_crc32.c by arduino_lib/extras/sync_from_custom_ops.py;
 * edit the source, not this copy, and re-run the script. */
/*
 * CRC-32 (zlib's: polynomial 0xEDB88320 reflected), four bits at a time: the integrity record of a
 * model (mcubert_verify_model.c) and the tokenizer blob's check (mcubert_tokenizer.c).
 */
#include "mcubert_internal.h"

/* A 16-entry table: 64 bytes of Flash instead of zlib's 1 KB, for ~2x the instructions per byte. */
static const uint32_t crc_nibble[16] = {0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u,
                                        0x4DB26158u, 0x5005713Cu, 0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu,
                                        0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu};

uint32_t mcubert_crc32_update(uint32_t state, const uint8_t *data, uint32_t length)
{
    uint32_t i;
    for (i = 0; i < length; ++i) {
        state ^= data != NULL ? data[i] : 0u;
        state = (state >> 4) ^ crc_nibble[state & 0xFu];
        state = (state >> 4) ^ crc_nibble[state & 0xFu];
    }
    return state;
}
